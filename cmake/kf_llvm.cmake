# kf_llvm.cmake -- the optional CPU backend (codegen/llvm, runtime/cpu) and its
# LLVM 19 dependency, included from the top-level CMakeLists.txt after the
# library targets exist.
#
# Found: the backend's sources are compiled, KF_HAVE_LLVM is defined for the
# library's objects, and libLLVM (the shared library, by its full path, so the
# exported kfuse_static target needs no LLVM CMake package) and pthreads are
# linked. Not found (the GPU machines have no LLVM): the sources are skipped
# and kf_compile for the CPU returns KF_ERR_UNSUPPORTED saying why.
#
#   -DKF_WITH_LLVM=OFF     build without the CPU backend even where LLVM is
#   -DLLVM_DIR=<dir>       an LLVM 19 CMake package elsewhere

option(KF_WITH_LLVM "Build the CPU backend (needs LLVM 19 with its C API)" ON)

set(KF_HAVE_LLVM OFF)
if(KF_WITH_LLVM)
    # No version in the call: LLVM's version file accepts only its own
    # major.minor ("19" does not match 19.1.7); the major is checked below.
    find_package(LLVM CONFIG QUIET
                 HINTS /usr/lib/llvm-19/lib/cmake/llvm /usr/lib/llvm/19/lib/cmake/llvm)
    if(LLVM_FOUND AND LLVM_VERSION_MAJOR VERSION_GREATER_EQUAL 15)
        find_library(KF_LLVM_LIBRARY NAMES LLVM-${LLVM_VERSION_MAJOR} LLVM
                     HINTS "${LLVM_LIBRARY_DIR}" NO_DEFAULT_PATH)
        if(KF_LLVM_LIBRARY)
            set(KF_HAVE_LLVM ON)
        endif()
    endif()
endif()

file(GLOB_RECURSE _kf_cpu_sources CONFIGURE_DEPENDS
     "${PROJECT_SOURCE_DIR}/codegen/llvm/*.c" "${PROJECT_SOURCE_DIR}/runtime/cpu/*.c")
if(KF_HAVE_LLVM)
    find_package(Threads REQUIRED)
    target_include_directories(kfuse_objects SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS})
    target_compile_definitions(kfuse_objects PRIVATE KF_HAVE_LLVM=1)
    # In-tree readers of the internals (tests, CLI) see it too.
    target_compile_definitions(kfuse_internal INTERFACE KF_HAVE_LLVM=1)
    foreach(_lib kfuse kfuse_static)
        target_link_libraries(${_lib} PRIVATE "${KF_LLVM_LIBRARY}" ${CMAKE_THREAD_LIBS_INIT})
    endforeach()
    # A static link of libkfuse.a needs libLLVM too: kfuse.pc's Libs.private
    # names it (-L its directory, -l its name), so `pkg-config --static` works.
    get_filename_component(_kf_llvm_dir "${KF_LLVM_LIBRARY}" DIRECTORY)
    get_filename_component(_kf_llvm_name "${KF_LLVM_LIBRARY}" NAME)
    string(REGEX REPLACE "^lib" "" _kf_llvm_name "${_kf_llvm_name}")
    string(REGEX REPLACE "\\.(so|a|dylib)(\\..*)?$" "" _kf_llvm_name "${_kf_llvm_name}")
    string(APPEND KF_PC_LIBS_PRIVATE " -L${_kf_llvm_dir} -l${_kf_llvm_name} ${CMAKE_THREAD_LIBS_INIT}")
    string(STRIP "${KF_PC_LIBS_PRIVATE}" KF_PC_LIBS_PRIVATE)
    set(KF_LLVM_SUMMARY "${LLVM_PACKAGE_VERSION} (${KF_LLVM_LIBRARY}): CPU backend built")
else()
    if(_kf_cpu_sources)
        set_source_files_properties(${_kf_cpu_sources} PROPERTIES HEADER_FILE_ONLY ON)
    endif()
    if(KF_WITH_LLVM)
        set(KF_LLVM_SUMMARY "LLVM 19 not found: no CPU backend (kf_compile returns KF_ERR_UNSUPPORTED)")
    else()
        set(KF_LLVM_SUMMARY "off (KF_WITH_LLVM=OFF): no CPU backend")
    endif()
endif()

# The CPU benchmark (bench/cpu_bench.c): not a test, off by default. It
# compares GEMMs with OpenBLAS (libopenblas-dev) when that is installed. The
# test suite builds it too, to check its arguments and where it writes
# (cpu_bench_args, a --quick run).
option(KF_BUILD_BENCH "Build bench/cpu_bench (needs the CPU backend; OpenBLAS optional)" OFF)
if((KF_BUILD_BENCH OR KF_BUILD_TESTS) AND KF_HAVE_LLVM)
    add_executable(cpu_bench bench/cpu_bench.c)
    target_link_libraries(cpu_bench PRIVATE kfuse_internal)
    find_library(KF_OPENBLAS_LIBRARY NAMES openblas)
    if(KF_OPENBLAS_LIBRARY)
        target_link_libraries(cpu_bench PRIVATE "${KF_OPENBLAS_LIBRARY}")
        target_compile_definitions(cpu_bench PRIVATE KF_HAVE_OPENBLAS=1)
    endif()
    execute_process(COMMAND git rev-parse --short HEAD WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
                    OUTPUT_VARIABLE _kf_commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT _kf_commit)
        set(_kf_commit unknown)
    endif()
    target_compile_definitions(cpu_bench PRIVATE KF_BENCH_COMMIT="${_kf_commit}")
endif()

# cpu_bench's arguments: --help prints and writes nothing, a bad argument is
# refused, and a --quick run writes its JSON to --out or $TMPDIR, never into
# the directory it runs in.
if(KF_BUILD_TESTS AND KF_HAVE_LLVM)
    find_program(KF_BASH_BENCH bash)
    if(KF_BASH_BENCH)
        add_test(NAME cpu_bench_args
                 COMMAND "${KF_BASH_BENCH}" "${PROJECT_SOURCE_DIR}/tests/cli/cpu_bench_test.sh"
                         "$<TARGET_FILE:cpu_bench>")
        set_tests_properties(cpu_bench_args PROPERTIES TIMEOUT 300)
    endif()
endif()

# `kfuse run --check` on every example (and every fusion pattern): compiled
# for the CPU, run on random inputs, compared with the reference evaluator.
if(KF_BUILD_TESTS AND KF_HAVE_LLVM)
    file(GLOB _kf_run_examples CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/examples/*.kfg"
         "${PROJECT_SOURCE_DIR}/examples/patterns/*.kfg")
    foreach(_example IN LISTS _kf_run_examples)
        get_filename_component(_stem "${_example}" NAME_WE)
        add_test(NAME cli_run_${_stem}
                 COMMAND kfuse_cli run "${_example}" --target cpu --check --seed 7
                 WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}")
        set_tests_properties(cli_run_${_stem} PROPERTIES
            ENVIRONMENT "KF_CACHE_DIR=${PROJECT_BINARY_DIR}/kf-test-cache" TIMEOUT 120)
        # a pattern that states its head-split count runs that plan too
        file(STRINGS "${_example}" _kf_head REGEX "# expect head epilogue:")
        if(_kf_head)
            add_test(NAME cli_run_${_stem}_head_epilogue
                     COMMAND kfuse_cli run "${_example}" --target cpu --check --seed 7
                             --gemm-head-epilogue
                     WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}")
            set_tests_properties(cli_run_${_stem}_head_epilogue PROPERTIES
                ENVIRONMENT "KF_CACHE_DIR=${PROJECT_BINARY_DIR}/kf-test-cache" TIMEOUT 120)
        endif()
    endforeach()
endif()

# test_cpu drives 5,000 JIT-compiled random graphs: under ASan on a busy
# 2-core machine it may pass the suites' common 300 s limit.
if(KF_BUILD_TESTS AND KF_HAVE_LLVM)
    cmake_language(DEFER CALL set_tests_properties test_cpu PROPERTIES TIMEOUT 900)
    # test_numerics: 200 seeds of a bf16 transformer block, each evaluated twice
    # in double (at its dtypes and exactly) under ASan.
    cmake_language(DEFER CALL set_tests_properties test_numerics PROPERTIES TIMEOUT 900)
endif()
