# find_package(memtrace): the target memtrace::api (libmemtrace_api.a and include/memtrace/).
include(CMakeFindDependencyMacro)
find_dependency(Threads)
include(${CMAKE_CURRENT_LIST_DIR}/memtraceTargets.cmake)
