# layers.cmake -- the library's layering, checked on its object files (ctest: layers).
#
#   cmake -DNM=nm -DOBJECTS="a.o|b.o|..." -P tests/layers.cmake
#
# The modules are layered ir < fusion < codegen < runtime < frontend (DESIGN.md's
# folder table): a module may call only what its own layer or a lower one defines,
# so the planner links without codegen, runtime and frontend, and the runtime
# without the frontend. Every undefined symbol of every object is looked up among
# the symbols the objects define; one defined in a higher layer fails the test,
# naming both files. (The generated template table belongs to codegen.)

if(NOT NM OR NOT OBJECTS)
    message(FATAL_ERROR "usage: cmake -DNM=nm -DOBJECTS=\"a.o|b.o\" -P layers.cmake")
endif()
string(REPLACE "|" ";" _objects "${OBJECTS}")
set(_ranks ir 0 fusion 1 codegen 2 generated 2 runtime 3 frontend 4)

# The module of an object file: the first path component after kfuse_objects.dir/.
function(kf_module obj out)
    string(REGEX MATCH "kfuse_objects\\.dir/(.*)$" _m "${obj}")
    set(_rel "${CMAKE_MATCH_1}")
    string(REGEX MATCH "(^|/)(ir|fusion|codegen|generated|runtime|frontend)/" _m "${_rel}")
    if(NOT _m)
        message(FATAL_ERROR "layers: ${obj} is in no known module")
    endif()
    set(${out} "${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()

function(kf_rank module out)
    list(FIND _ranks "${module}" _i)
    math(EXPR _i "${_i} + 1")
    list(GET _ranks ${_i} _r)
    set(${out} ${_r} PARENT_SCOPE)
endfunction()

set(_n 0)
foreach(_obj IN LISTS _objects)
    kf_module("${_obj}" _mod)
    execute_process(COMMAND "${NM}" -g "${_obj}" OUTPUT_VARIABLE _syms RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
        message(FATAL_ERROR "layers: ${NM} ${_obj} failed")
    endif()
    string(REPLACE "\n" ";" _lines "${_syms}")
    foreach(_l IN LISTS _lines)
        if(_l MATCHES "^[0-9a-fA-F]+ [TDBRC] (.+)$")
            set(_def_${CMAKE_MATCH_1} "${_mod}|${_obj}")
        elseif(_l MATCHES "^ +U (kf_.+)$")
            list(APPEND _undef_${_n} "${CMAKE_MATCH_1}")
        endif()
    endforeach()
    set(_obj_${_n} "${_obj}")
    set(_mod_${_n} "${_mod}")
    math(EXPR _n "${_n} + 1")
endforeach()

set(_bad 0)
math(EXPR _last "${_n} - 1")
foreach(_i RANGE ${_last})
    kf_rank("${_mod_${_i}}" _r)
    foreach(_u IN LISTS _undef_${_i})
        if(DEFINED _def_${_u})
            string(REPLACE "|" ";" _d "${_def_${_u}}")
            list(GET _d 0 _dmod)
            list(GET _d 1 _dobj)
            kf_rank("${_dmod}" _dr)
            if(_dr GREATER _r)
                message(SEND_ERROR "layers: ${_mod_${_i}} calls ${_u}, defined in ${_dmod} "
                                   "(${_obj_${_i}} -> ${_dobj}); move it below")
                math(EXPR _bad "${_bad} + 1")
            endif()
        endif()
    endforeach()
endforeach()
if(_bad GREATER 0)
    message(FATAL_ERROR "layers: ${_bad} call(s) into a higher layer")
endif()
message(STATUS "layers: ${_n} objects, no call into a higher layer")
