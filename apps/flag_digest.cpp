#include "apps/flag_digest.h"

#include <sys/stat.h>

#include <cstdlib>

#include "core/sha256.h"

namespace pt::app {

namespace {

// A number when the whole text is one, else the text.
json value_of(const std::string& text) {
  if (!text.empty()) {
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (end && *end == '\0') return v;
  }
  return text;
}

}  // namespace

json flag_digest(const CLI::App& app, const std::set<std::string>& per_worker, const std::set<std::string>& files,
                 const std::set<std::string>& read) {
  json out = json::object();
  for (const CLI::Option* opt : app.get_options()) {
    std::string name = opt->get_name();
    if (per_worker.count(name) || name == "--help" || name == "-h") continue;
    if (opt->get_expected_max() == 0) {  // a flag: how often it was given
      out[name] = opt->count();
      continue;
    }
    std::vector<std::string> given = opt->results();
    struct stat st;
    // Data a path names, given or the default (the default and the same folder given were told
    // apart, and the workers refused to train).
    const std::string& path = given.size() == 1 ? given[0] : opt->get_default_str();
    if (given.size() <= 1 && read.count(name) && !path.empty() && ::stat(path.c_str(), &st) == 0) {
      out[name] = "a path: by what is read from it";
      continue;
    }
    if (given.empty()) {
      out[name] = opt->get_default_str().empty() ? json() : value_of(opt->get_default_str());
      continue;
    }
    json values = json::array();
    for (const auto& v : given) {
      if (files.count(name) && ::stat(v.c_str(), &st) == 0 && S_ISREG(st.st_mode))
        values.push_back("sha256:" + to_hex(sha256_of_file(v)));
      else
        values.push_back(value_of(v));
    }
    out[name] = values.size() == 1 ? values[0] : values;
  }
  return out;
}

}  // namespace pt::app
