// Loaded with dlopen by the tests, after a Symbolizer was made.
extern "C" __attribute__((visibility("default"), noinline)) int symtest_dl_fn(int x) {
  return x * 7 + 1;
}
