// What the sanitizer builds (CMake's MEMTRACE_SANITIZE, scripts/test-sanitizers.sh and
// scripts/test-tsan.sh) must be told about memtrace's own code. Empty in a normal build.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define MEMTRACE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MEMTRACE_TSAN 1
#endif
#endif

// A region whose reads race with other threads' writes on purpose, each such read being checked
// afterwards (say why at each use). ThreadSanitizer records and checks no access this thread makes
// between BEGIN and END, library calls included (a std::copy that becomes memmove), which an
// attribute on the function could not promise. Keep the region to the racy copy itself.
#ifdef MEMTRACE_TSAN
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#define MEMTRACE_TSAN_IGNORE_READS_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define MEMTRACE_TSAN_IGNORE_READS_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define MEMTRACE_TSAN_IGNORE_READS_BEGIN() ((void)0)
#define MEMTRACE_TSAN_IGNORE_READS_END() ((void)0)
#endif
