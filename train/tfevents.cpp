// Event files: CRC-32C, TFRecord framing, and the Event protos serialised by protobuf (see
// tfevents.h).
#include "train/tfevents.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "backends/error.h"
#include "common/files.h"
#include "train/proto/tfevents.pb.h"

namespace vitrine::train {

namespace {

/// table[b]: the CRC register after shifting the byte b through it (reflected, 8 steps).
constexpr std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[b] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = crc32c_table();

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view bytes, uint32_t crc) {
  uint32_t c = ~crc;
  for (const char ch : bytes) c = kCrc32cTable[(c ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::string event_file_name(int64_t unix_seconds, const std::string& hostname) {
  return fmt::format("events.out.tfevents.{}.{}", unix_seconds, hostname);
}

bool is_event_file_name(const std::string& name) {
  return name.rfind("events.out.tfevents.", 0) == 0;
}

EventWriter::EventWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  VT_CHECK(fd_ >= 0, "cannot write the TensorBoard event file {}: {}", path_, std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    fail("cannot write the TensorBoard event file {}: {}", path_, std::strerror(e));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ == 0) {
    tensorboard::Event event;
    event.set_wall_time(now_seconds());
    event.set_file_version("brain.Event:2");
    try {
      append(event.SerializeAsString());
    } catch (...) {
      ::close(fd_);
      throw;
    }
  }
}

EventWriter::~EventWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventWriter::add_scalars(int64_t step, const std::vector<Scalar>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  append(event.SerializeAsString());
}

void EventWriter::add_image(int64_t step, const std::string& tag, std::string_view encoded,
                            int64_t height, int64_t width, int colorspace) {
  VT_CHECK(height > 0 && width > 0 && height <= INT32_MAX && width <= INT32_MAX,
           "{}: an image of {} x {} pixels cannot be written", path_, height, width);
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  tensorboard::Summary::Image* image = v->mutable_image();
  image->set_height(static_cast<int32_t>(height));
  image->set_width(static_cast<int32_t>(width));
  image->set_colorspace(colorspace);
  image->set_encoded_image_string(std::string(encoded));
  append(event.SerializeAsString());
}

void EventWriter::append(std::string_view event) {
  const std::string record = tfrecord(event);
  const int error = tools::write_all(fd_, record);
  if (error != 0) {
    (void)::ftruncate(fd_, static_cast<off_t>(size_));  // never leave half a record
    fail("cannot write the TensorBoard event file {}: {} (the event was not added)", path_,
         std::strerror(error));
  }
  size_ += record.size();
}

}  // namespace vitrine::train
