#include "profile/alike_key.h"

#include <cctype>
#include <sstream>

namespace pt::profile {

namespace {

std::string without_name_numbers(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char prev = i > 0 ? s[i - 1] : ' ';
    // A '.' after a digit is a decimal point (0.25), after a name a path (blocks.3).
    bool decimal = prev == '.' && i > 1 && std::isdigit(static_cast<unsigned char>(s[i - 2]));
    bool after_name = std::isalpha(static_cast<unsigned char>(prev)) || prev == '_' || (prev == '.' && !decimal) ||
                      prev == '%' || prev == '"';
    if (std::isdigit(static_cast<unsigned char>(s[i])) && after_name) {
      while (i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) ++i;
      out += '#';
    } else {
      out += s[i];
    }
  }
  return out;
}

void put_tensor(std::ostream& k, const torch::Tensor& t) {
  if (!t.defined()) {
    k << "none;";
    return;
  }
  k << t.sizes() << ' ' << t.dtype() << (t.requires_grad() ? " grad;" : ";");
}

}  // namespace

std::string alike_key(const torch::nn::Sequential& module, const torch::Tensor& input, const torch::Tensor& output,
                      const Layer& l, int index) {
  std::ostringstream code;
  code << *module << '\n';
  for (const auto& p : module->named_parameters()) code << p.key() << '\n';
  for (const auto& b : module->named_buffers()) code << b.key() << '\n';
  std::ostringstream k;
  k << without_name_numbers(code.str());
  for (const auto& p : module->parameters()) put_tensor(k, p);
  k << "|buffers ";
  for (const auto& b : module->buffers()) put_tensor(k, b);
  k << "|in ";
  put_tensor(k, input);
  k << "|out ";
  put_tensor(k, output);
  k << "|reads";
  for (int src : l.inputs) k << ' ' << index - src;
  k << "|bytes " << l.activation_bytes << ' ' << l.parameter_bytes << ' ' << l.buffer_bytes << ' ' << l.stash_bytes
    << ' ' << l.fixed_stash_bytes << ' ' << l.split_bytes << ' ' << l.workspace_bytes << ' ' << l.fixed_workspace_bytes << ' '
    << l.split_workspace_bytes;
  return k.str();
}

}  // namespace pt::profile
