// TensorBoard's event files ("tfevents"), written with protobuf from the message declarations in
// train/proto/tfevents.proto. A file is a sequence of TFRecord records, each one serialised
// Event:
//
//   uint64 length       little-endian, the data's byte count
//   uint32 masked_crc   masked_crc32c of those 8 length bytes, little-endian
//   byte   data[length] the serialised Event
//   uint32 masked_crc   masked_crc32c of the data, little-endian
//
// The first record is an Event {wall_time, file_version: "brain.Event:2"}; each later one an
// Event {wall_time, step, summary} whose Summary holds named values (a scalar's simple_value, or an
// encoded image). TensorBoard reads every file whose name contains "tfevents" in the folders under
// its --logdir, one run per folder.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vitrine::train {

/// CRC-32C (Castagnoli): the reflected polynomial 0x82F63B78, initial value and final xor
/// 0xFFFFFFFF (crc32c("123456789") = 0xE3069283), continued from `crc` (the CRC of the bytes
/// before).
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);

/// TFRecord's masked CRC of bytes: with c = crc32c(bytes), ((c >> 15) | (c << 17)) + 0xa282ead8
/// (modulo 2^32). The mask keeps a CRC computed over data that holds CRCs from being trivial.
uint32_t masked_crc32c(std::string_view bytes);

/// One TFRecord record around data (the framing above).
std::string tfrecord(std::string_view data);

/// The name TensorFlow gives an event file: "events.out.tfevents.<unix seconds>.<hostname>".
std::string event_file_name(int64_t unix_seconds, const std::string& hostname);
/// Whether a file name is an event file's (it starts with "events.out.tfevents.").
bool is_event_file_name(const std::string& name);

/// A scalar for a Summary: its tag ("train/loss") and value (written as a float32).
using Scalar = std::pair<std::string, double>;

/// Appends events to one event file, a whole record at a time: each record is written with one
/// write and flushed to the system before the call returns, and a write that fails (a full disk, a
/// file-size limit) cuts the file back to its last whole record and throws vitrine::Error naming
/// the path. Not thread-safe.
class EventWriter {
 public:
  /// Opens path for appending; a file that does not exist or is empty gets the file_version
  /// event first. An Error names the path when it cannot be opened or written.
  explicit EventWriter(std::string path);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  /// One event at `step` with a simple_value for each scalar, in order.
  void add_scalars(int64_t step, const std::vector<Scalar>& scalars);
  /// One event at `step` with an encoded image (PNG, JPEG, ...) of height x width pixels;
  /// colorspace 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA.
  void add_image(int64_t step, const std::string& tag, std::string_view encoded, int64_t height,
                 int64_t width, int colorspace);

  const std::string& path() const { return path_; }
  /// The file's size in bytes: whole records only.
  uint64_t size() const { return size_; }

 private:
  /// Frames a serialised Event as a record and appends it.
  void append(std::string_view event);

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace vitrine::train
