#pragma once
// A torch.save or TorchScript file is a zip archive whose records carry CRC-32s that LibTorch's
// reader does not check (PyTorch builds miniz without them): a model file whose weight byte was
// flipped trained, exit 0. This walks the archive's central directory and checks each stored
// record against its CRC-32, reading the file once in blocks (zip64 included).
#include <string>

namespace pt::model {

// FormatError naming `path` and the record where a stored record's bytes do not match its CRC-32
// or run past the file's end. A file that is not a zip archive is left to the loader to refuse;
// compressed records (torch.save writes none) are not inflated to check.
void check_zip_records(const std::string& path);

}  // namespace pt::model
