/* Test-only: does not compile. */
int broken(void) { return 1 +; }
