// Unit tests of the Jinja interpreter.
#include <gtest/gtest.h>
TEST(Jinja, Placeholder) {}
