// libFuzzer target for the tune.yaml / train.yaml loaders: arbitrary text as a user's file.
// ConfigFileError (with a file and line) is the one expected way to refuse it; any other
// exception escaping the loader (YAML::Exception, std::out_of_range, nlohmann::json's errors,
// ...) is a bug, and so is a crash or a sanitizer report.

#include <rayd/tune/config_file.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

template <typename Fn>
void ExpectOnlyConfigFileError(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const rayd::tune::ConfigFileError& e) {
    // Refusals name the file: "fuzz.yaml:LINE: ...".
    if (std::string(e.what()).rfind("fuzz.yaml:", 0) != 0) {
      std::fprintf(stderr, "%s: ConfigFileError without the file: %s\n", what, e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: escaped as a non-ConfigFileError: %s\n", what, e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ExpectOnlyConfigFileError("ParseTuneFile", [&] {
    auto file = rayd::tune::ParseTuneFile(text, "fuzz.yaml");
    (void)file;
  });
  ExpectOnlyConfigFileError("ParseTrainFile", [&] {
    auto file = rayd::tune::ParseTrainFile(text, "fuzz.yaml");
    (void)file;
  });
  return 0;
}
