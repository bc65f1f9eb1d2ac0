# kf_cuda.cmake -- what the runtime links for CUDA, included from the top-level
# CMakeLists.txt once the kfuse targets exist.
#
#   NVRTC      linked from the CUDA toolkit (libnvrtc); runtime/nvrtc.c sees
#              KF_HAVE_NVRTC=1. Without a toolkit the library still builds and
#              every NVRTC call returns KF_ERR_UNSUPPORTED saying so.
#   libdl      for dlopen("libcuda.so.1"): the driver is NEVER linked, so the
#              library loads and the CPU target works on a machine without one
#              (DESIGN.md, "Runtime rules"). Do not add CUDA::cuda_driver here.
#   pthreads   the driver table is loaded once per context under its mutex.
#   cuBLASLt   NOT linked either: runtime/cublaslt.c dlopens it at first use
#              (libcublasLt.so.13 on the loader's path, else the toolkit file
#              found here, passed as KF_CUBLASLT_PATH), so the library still
#              loads where there is no toolkit or driver.

if(NOT CUDAToolkit_FOUND)
    find_package(CUDAToolkit QUIET)
endif()
find_package(Threads REQUIRED)

# The library file itself, not the CUDA::nvrtc target: FindCUDAToolkit (CMake
# 3.25) gives that target a dependency on CUDA::cuda_driver, which would link
# the toolkit's libcuda stub and make every binary need libcuda.so.1 to start.
set(KF_HAVE_NVRTC OFF)
if(CUDAToolkit_FOUND)
    find_library(KF_NVRTC_LIBRARY nvrtc HINTS "${CUDAToolkit_LIBRARY_DIR}" NO_DEFAULT_PATH)
endif()
if(KF_NVRTC_LIBRARY)
    set(KF_HAVE_NVRTC ON)
    target_compile_definitions(kfuse_objects PRIVATE KF_HAVE_NVRTC=1)
    # Only nvrtc.h is needed; cuda.h is not included (runtime/cuda.h declares
    # the few driver types it uses, so the dlopen layer builds without it).
    target_include_directories(kfuse_objects SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
else()
    message(WARNING "CUDA toolkit with NVRTC not found: kfuse builds without NVRTC "
                    "(CUDA compiles return KF_ERR_UNSUPPORTED). Set CUDAToolkit_ROOT to "
                    "/usr/local/cuda or similar to enable it.")
endif()

if(CUDAToolkit_FOUND)
    find_file(KF_CUBLASLT_FILE NAMES libcublasLt.so.13 libcublasLt.so.12 libcublasLt.so
              HINTS "${CUDAToolkit_LIBRARY_DIR}" NO_DEFAULT_PATH)
endif()
if(KF_CUBLASLT_FILE)
    target_compile_definitions(kfuse_objects PRIVATE KF_CUBLASLT_PATH="${KF_CUBLASLT_FILE}")
endif()

foreach(_lib kfuse kfuse_static)
    if(KF_HAVE_NVRTC)
        target_link_libraries(${_lib} PRIVATE "${KF_NVRTC_LIBRARY}")
    endif()
    # Plain flags, not the Threads::Threads target: the installed package's
    # static archive exports its link interface, and consumers should not need
    # find_package(Threads) to read it.
    target_link_libraries(${_lib} PRIVATE ${CMAKE_DL_LIBS} ${CMAKE_THREAD_LIBS_INIT})
endforeach()

# What a static link of libkfuse.a needs besides libm, for kfuse.pc.
set(KF_PC_LIBS_PRIVATE "${CMAKE_THREAD_LIBS_INIT}")
foreach(_dl IN LISTS CMAKE_DL_LIBS)
    string(APPEND KF_PC_LIBS_PRIVATE " -l${_dl}")
endforeach()
if(KF_HAVE_NVRTC)
    get_filename_component(_kf_nvrtc_dir "${KF_NVRTC_LIBRARY}" DIRECTORY)
    string(APPEND KF_PC_LIBS_PRIVATE " -L${_kf_nvrtc_dir} -lnvrtc")
endif()
string(STRIP "${KF_PC_LIBS_PRIVATE}" KF_PC_LIBS_PRIVATE)
