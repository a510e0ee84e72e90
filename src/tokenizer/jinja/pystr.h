// Python str semantics over UTF-8 strings: code-point length/slicing, strip, split, case, repr.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace ft::jinja {

std::u32string utf8_decode(const std::string& s);
std::string utf8_encode(const std::u32string& s);
void utf8_append(std::string& out, char32_t c);

bool py_isspace(char32_t c);
size_t py_len(const std::string& s);  // in code points
// s.strip(chars) / lstrip / rstrip; nullopt chars = whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right);
// s.split(sep, maxsplit) / s.rsplit(sep, maxsplit); nullopt sep = runs of whitespace.
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  long maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       long count);
// Case mapping covers ASCII and Latin-1/Greek/Cyrillic letters.
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);  // str.title(), not jinja's |title
bool py_isupper(const std::string& s);
bool py_islower(const std::string& s);
std::string py_repr_str(const std::string& s);
// Index in code points of `sub` in s (find/rfind), or -1.
long py_find(const std::string& s, const std::string& sub, bool from_right);
long py_count(const std::string& s, const std::string& sub);

}  // namespace ft::jinja
