// Uses the installed training library (vitrine::train, which links libprotobuf): writes a
// TensorBoard event file with one scalar and prints its size and CRC-32C's check value.
#include <train/tfevents.h>

#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  namespace tr = vitrine::train;
  const std::string path = std::string(argv[1]) + "/" + tr::event_file_name(1700000000, "consumer");
  {
    tr::EventWriter w(path);
    w.add_scalars(1, {{"train/loss", 0.5}});
  }
  std::printf("crc32c %08x, event file of %ju bytes\n", tr::crc32c("123456789"),
              static_cast<uintmax_t>(std::filesystem::file_size(path)));
  return 0;
}
