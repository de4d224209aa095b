# cmake -DTGZ=<archive> -DDEST=<folder> -P unpack_traces.cmake
# Unpacks the shared routing traces once; later runs find the marker and return at once.
if(NOT EXISTS "${TGZ}")
  message(FATAL_ERROR "shared traces not found at ${TGZ} (expected ../shared/traces beside the checkout)")
endif()
if(EXISTS "${DEST}/.unpacked")
  return()
endif()
file(REMOVE_RECURSE "${DEST}")
file(MAKE_DIRECTORY "${DEST}")
file(ARCHIVE_EXTRACT INPUT "${TGZ}" DESTINATION "${DEST}")
file(TOUCH "${DEST}/.unpacked")
