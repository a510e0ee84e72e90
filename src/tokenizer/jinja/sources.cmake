# Jinja chat-template interpreter (issue 3), added to the core library; chat_template.cpp is
# added by the parent CMakeLists.txt.
target_sources(ft_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/builtins.cpp
  ${CMAKE_CURRENT_LIST_DIR}/filters.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lexer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/methods.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parser.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pystr.cpp
  ${CMAKE_CURRENT_LIST_DIR}/template.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tests.cpp
  ${CMAKE_CURRENT_LIST_DIR}/value.cpp
)
