// Test helpers: value comparison, gradcheck as an assertion, and error-message checks.
#pragma once
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "vitrine.h"

namespace vt_test {

/// Marks the running test case skipped, saying why in its output: run by ctest (which sets
/// VITRINE_TEST_SKIP_CODE), a case that passes after skip() exits with that code, and ctest
/// lists it as skipped instead of passed. Return from the case right after it.
void skip(const std::string& why);
/// Whether skip() was called in this process.
bool skipped();
/// Why no GPU is usable here ("no GPU: ..."), or "" when one is (asked once per process).
const std::string& gpu_unavailable();
/// Whether a GPU is usable; if not, skip() says why. The CUDA cases open with it.
bool gpu_or_skip();

using namespace vitrine;

/// Checks every element of t against expected (row-major): |t - e| <= atol + rtol * |e|.
void check_close(const Tensor& t, const std::vector<double>& expected, double atol = 1e-5,
                 double rtol = 1e-5);
/// Checks two tensors elementwise (same shape).
void check_close(const Tensor& a, const Tensor& b, double atol = 1e-5, double rtol = 1e-5);
/// Runs gradcheck in float64 and fails the test with its message when it fails.
void check_grad(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                const std::vector<Tensor>& inputs, GradcheckOptions opt = {});
/// A float64 leaf requiring grad with values from randn(seed), optionally shifted/scaled.
Tensor rand64(const Dims& shape, uint64_t seed, double scale = 1.0, double shift = 0.0);
/// The path of a file under tests/fixtures.
std::string fixture(const std::string& name);

/// A fixture file's JSON (tests/fixtures/<file>), parsed once per process.
const nlohmann::json& fixture_json(const std::string& file);
/// One case of a fixture file ({"cases": {name: ...}}); fails the test when it is missing.
const nlohmann::json& fixture_case(const std::string& file, const std::string& name);
/// A fixture tensor {"shape": [...], "values" (or "data"): [...]} in dtype.
Tensor fixture_tensor(const nlohmann::json& j, DType dtype = kFloat64);
/// Loads a fixture's {name: tensor} state into m (every tensor of m's state_dict must be there,
/// in m's dtypes).
void load_fixture_state(nn::Module& m, const nlohmann::json& state);

/// The whole content of a file ("" when it cannot be read).
std::string read_text(const std::string& path);
/// How many times `what` occurs in s, not overlapping.
size_t count(const std::string& s, const std::string& what);
/// The first capture group of every match of the regular expression re in s, in order.
std::vector<std::string> captures(const std::string& s, const std::string& re);

/// Sets the CPU backend's thread count for a scope (a library call compared bit for bit with a
/// program that run_process started, which runs on one thread, computes as that program does).
struct Threads {
  explicit Threads(int n) : before(vitrine::get_num_threads()) { vitrine::set_num_threads(n); }
  ~Threads() { vitrine::set_num_threads(before); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;
  int before;
};

/// A row of a torchinfo-style table (nn::summary): indentation depth, "name (Type)", output
/// shape, Param # (0 for "--").
struct SummaryRow {
  int depth;
  std::string label, shape;
  int64_t params;
};
/// The rows between the table's header and its footer; columns are separated by two or more
/// spaces (labels and shapes hold single ones).
std::vector<SummaryRow> summary_rows(const std::string& table);
/// The row labelled `label` (a failed REQUIRE without one).
const SummaryRow& row_of(const std::vector<SummaryRow>& rows, const std::string& label);
/// The rows' Param # added up.
int64_t sum_params(const std::vector<SummaryRow>& rows);

/// Image files from 8-bit pixels in HWC order (comp = 1 grey, 3 RGB, 4 RGBA), written with
/// stb_image_write; the parent folders are created. JPEG at quality 100.
void write_png(const std::string& path, int w, int h, int comp, const std::vector<uint8_t>& hwc);
void write_bmp(const std::string& path, int w, int h, int comp, const std::vector<uint8_t>& hwc);
void write_jpg(const std::string& path, int w, int h, int comp, const std::vector<uint8_t>& hwc);

/// {train,t10k}-{images-idx3,labels-idx1}-ubyte in dir (a Fashion-MNIST folder): train_n and
/// test_n examples, label k = i % 10, a grid of 2x2 dots at 230 on noise below 80, every
/// (k / 2 + 2)-th row and (k % 2 + 1)-th column of dots. (A task that needs the position
/// embeddings, such as a block whose place is the class, is too slow for a model this small to
/// learn.)
void write_stripes(const std::string& dir, int train_n, int test_n);

/// A fresh directory under the system's temp folder, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path dir;
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The path of a file in the directory.
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
  /// Names of the files in the directory, sorted.
  std::vector<std::string> files() const;
};

/// A program started by spawn_process.
struct Process {
  int pid = -1;
};
/// Starts exe (a path, or a bare name looked up in PATH) with args in the folder cwd, stdout and
/// stderr to the file log, with one OpenMP thread (OMP_NUM_THREADS=1, so that runs are bitwise
/// repeatable) and otherwise this process's environment.
Process spawn_process(const std::string& exe, const std::vector<std::string>& args,
                      const std::string& log, const std::string& cwd);
/// Waits for it: the exit status, or 128 + the signal that ended it.
int wait_process(Process p);
/// Writes text to path (binary, replacing it); fails the test when it cannot.
void write_file(const std::string& path, const std::string& text);
/// A finished run: exit status and everything it printed.
struct ProcessResult {
  int code;
  std::string output;
};
/// spawn_process + wait_process, the output logged to dir/<name>.log.
ProcessResult run_process(const std::string& exe, const std::vector<std::string>& args,
                          const TempDir& dir, const std::string& name);

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
/// A reference case from a fixture JSON file ({"cases": {name: {"inputs": [...], "output": ...}}}).
struct RefCase {
  std::vector<Tensor> inputs;  // float64
  Tensor output;               // float64
};
RefCase load_case(const std::string& file, const std::string& name);
/// Runs fn on the case's inputs in float64 and float32 and compares with the reference output.
void check_forward(const std::string& file, const std::string& name, const Fn& fn,
                   double tol64 = 1e-10, double tol32 = 1e-5);
/// gradcheck of fn at the case's inputs (all of them require grad).
void check_grad_at(const std::string& file, const std::string& name, const Fn& fn,
                   GradcheckOptions opt = {});

}  // namespace vt_test

/// Checks that `expr` throws vitrine::Error whose message contains every given substring.
#define CHECK_ERROR_CONTAINS(expr, ...)                                                \
  do {                                                                                 \
    bool thrown_ = false;                                                              \
    try {                                                                              \
      (void)(expr);                                                                    \
    } catch (const vitrine::Error& e_) {                                               \
      thrown_ = true;                                                                  \
      std::string msg_ = e_.what();                                                    \
      for (const std::string& s_ : std::initializer_list<std::string>{__VA_ARGS__}) {  \
        INFO("message: " << msg_);                                                     \
        CHECK_MESSAGE(msg_.find(s_) != std::string::npos, "missing \"" << s_ << "\""); \
      }                                                                                \
    }                                                                                  \
    CHECK_MESSAGE(thrown_, "expected vitrine::Error from " #expr);                     \
  } while (0)
