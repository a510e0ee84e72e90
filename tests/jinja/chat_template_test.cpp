// ChatTemplate tests.
#include <gtest/gtest.h>
