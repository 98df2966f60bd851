# cmake -DINPUT=file -DOUTPUT=file.cc -DNAMESPACE=ns -DSYMBOL=name -P EmbedText.cmake
# Writes a C++ source defining `extern const char SYMBOL[]` with INPUT's text, so a daemon can
# serve a file without finding it on disk at run time.
file(READ "${INPUT}" text)
set(delimiter "rayd_embedded")  # at most 16 characters
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter ${delimiter}")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/EmbedText.cmake; do not edit.\n"
  "namespace ${NAMESPACE} {\n"
  "extern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"${delimiter}(${text})${delimiter}\";\n"
  "}\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
