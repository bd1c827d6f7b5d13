cmake_minimum_required(VERSION 3.22)
# Fails (as a build step) when hand-written protobuf code names a field by its bare number
# instead of protobuf's generated constant (v1::KeyBlock::kValuesFieldNumber): a renumbered
# field must break the build, not the wire at run time.
# Run as: cmake -DSOURCE_DIR=<repo root> -P tools/check_field_numbers.cmake
#
# It looks in the shipped sources of FOLDERS (tests, *_test.cc, and test helpers, testing/
# folders, may write bytes by hand: they check the hand-written codecs against protobuf) for:
#   - a variable named *field* compared with a number:   field == 7, 2 == field, field != 3
#   - a wire helper given a number for its field:         PutVarintField(2, ...), ...FieldSize(3,
#   - a tag computed from a number:                       (6 << 3) | wire::kFixed64
#   - a numbered case in a switch on a field:             switch (field) { case 3: ...
#   - tag bytes written as literals:                      char kDuplicate[] = {0x08, 0x01},
#                                                         out.push_back(0x0a), bytes[0] == 0x08,
#                                                         "\x08\x01"
# Before that it checks itself on tools/testdata/field_numbers_fixture.txt: every line of it
# that ends in "// flagged" must be flagged and no other, so that the patterns cannot rot into
# passing everything.

# The folders checked (-DFOLDERS="a;b" checks others by hand).
if(NOT DEFINED FOLDERS)
  set(FOLDERS client common server)
endif()

# One regular expression, the alternatives appended one by one (a CMake list would split
# those with an unbalanced bracket wrongly).
# A field compared with a number (0 is not a field number: ReadTag's check of it is fine).
set(pattern "(field[A-Za-z0-9_]*[ )]*[!=]=[ (]*[1-9])")
string(APPEND pattern "|([^A-Za-z0-9_.][1-9][0-9]*[ )]*[!=]=[ (*]*[A-Za-z0-9_.>-]*field)")
# A wire helper (PutVarintField, LengthFieldSize, PutLengthPrefix, PutTag, AppendBlocks, ...)
# given a number.
string(APPEND pattern "|((Field|FieldSize|Prefix|Tag|Blocks)[ ]*\\([ ]*[0-9]+[ ]*,)")
# A tag computed by hand.
string(APPEND pattern "|([^A-Za-z0-9_.][0-9]+[ ]*<<[ ]*3[^0-9])")
# Tag bytes as literals.
string(APPEND pattern "|(\\[\\][ ]*=[ ]*\\{[ ]*0x[0-9a-fA-F])")
string(APPEND pattern "|(push_back\\([^)]*0x[0-9a-fA-F])")
string(APPEND pattern "|(\\][ ]*[!=]=[ ]*0x[0-9a-fA-F][0-9a-fA-F]?[^0-9a-fA-F])")
string(APPEND pattern "|(\"\\\\x[0-9a-fA-F])")
set(case_pattern "^[ ]*case[ ]+[0-9]+[ ]*:")
set(switch_pattern "switch[ ]*\\([ ]*[*]?[A-Za-z0-9_.>-]*field[A-Za-z0-9_]*[ ]*\\)")
# Any of the above: files without one are not read line by line.
set(any_pattern "field|[0-9][ ]*,|<<|0x|\\\\x")

# The lines of `file` as a list in `out`, with the characters that CMake's lists treat
# specially (\ ; [ ]) replaced: `unescape` puts them back in one line.
function(read_lines file out)
  file(READ "${file}" content)
  string(REPLACE "\\" "@PS_BACKSLASH@" content "${content}")
  string(REPLACE ";" "@PS_SEMICOLON@" content "${content}")
  string(REPLACE "[" "@PS_OPEN@" content "${content}")
  string(REPLACE "]" "@PS_CLOSE@" content "${content}")
  string(REPLACE "\n" ";" lines "${content}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()
macro(unescape var)
  string(REPLACE "@PS_BACKSLASH@" "\\" ${var} "${${var}}")
  string(REPLACE "@PS_SEMICOLON@" ";" ${var} "${${var}}")
  string(REPLACE "@PS_OPEN@" "[" ${var} "${${var}}")
  string(REPLACE "@PS_CLOSE@" "]" ${var} "${${var}}")
endmacro()

# The lines of `file` that name a field by number: their numbers in `<out>_lines` (a list) and
# "<name>:<line>: <text>" each on a line of its own in `<out>_text` (a string: the text may hold
# characters that a CMake list does not keep).
function(scan file name out)
  set(numbers "")
  set(text "")
  file(READ "${file}" content)
  if(NOT content MATCHES "${any_pattern}")
    set(${out}_lines "" PARENT_SCOPE)
    set(${out}_text "" PARENT_SCOPE)
    return()
  endif()
  read_lines("${file}" lines)
  set(number 0)
  set(switch_indent -1)  # >= 0 inside a switch on a field
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    unescape(line)
    # Comments say numbers freely: only the code before a // is read.
    string(REGEX REPLACE "//.*$" "" code "${line}")
    set(indent 0)
    if(code MATCHES "^( +)")
      string(LENGTH "${CMAKE_MATCH_1}" indent)
    endif()
    if(switch_indent GREATER_EQUAL 0 AND code MATCHES "^ *}" AND indent LESS_EQUAL switch_indent)
      set(switch_indent -1)
    endif()
    set(hit FALSE)
    if(switch_indent GREATER_EQUAL 0 AND code MATCHES "${case_pattern}")
      set(hit TRUE)
    endif()
    if(code MATCHES "${switch_pattern}")
      set(switch_indent ${indent})
    endif()
    if(code MATCHES "${pattern}")
      set(hit TRUE)
    endif()
    if(hit)
      string(STRIP "${line}" stripped)
      list(APPEND numbers ${number})
      string(APPEND text "\n  ${name}:${number}: ${stripped}")
    endif()
  endforeach()
  set(${out}_lines "${numbers}" PARENT_SCOPE)
  set(${out}_text "${text}" PARENT_SCOPE)
endfunction()

# The self-test: the fixture's lines that end in "// flagged" and no others.
set(fixture tools/testdata/field_numbers_fixture.txt)
scan(${SOURCE_DIR}/${fixture} ${fixture} got)
read_lines(${SOURCE_DIR}/${fixture} fixture_lines)
set(want_lines "")
set(number 0)
foreach(line IN LISTS fixture_lines)
  math(EXPR number "${number} + 1")
  unescape(line)
  if(line MATCHES "// flagged$")
    list(APPEND want_lines ${number})
  endif()
endforeach()
if(NOT got_lines STREQUAL want_lines)
  message(FATAL_ERROR "tools/check_field_numbers.cmake fails its self-test: it flags lines "
                      "'${got_lines}' of ${fixture}, which marks lines '${want_lines}'${got_text}")
endif()

set(violations "")
foreach(folder IN LISTS FOLDERS)
  file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
    ${SOURCE_DIR}/${folder}/*.h ${SOURCE_DIR}/${folder}/*.cc)
  foreach(f IN LISTS files)
    if(f MATCHES "_test\\.cc$" OR f MATCHES "/testing/")
      continue()
    endif()
    scan(${SOURCE_DIR}/${f} ${f} found)
    string(APPEND violations "${found_text}")
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "Protobuf fields named by number, not by their generated k...FieldNumber "
                      "constant (tools/check_field_numbers.cmake):${violations}")
endif()
