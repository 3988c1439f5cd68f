#include "test_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

extern char** environ;

namespace vt_test {

namespace {
bool g_skipped = false;
}

void skip(const std::string& why) {
  g_skipped = true;
  MESSAGE("SKIPPED: " << why);
}

bool skipped() { return g_skipped; }

const std::string& gpu_unavailable() {
  static const std::string why = [] {
    try {
      ops::zeros({1}, kFloat32, Device::parse("cuda")).to(kCPU);
      return std::string();
    } catch (const Error& e) {
      return std::string("no GPU: ") + e.what();
    }
  }();
  return why;
}

bool gpu_or_skip() {
  if (!gpu_unavailable().empty()) skip(gpu_unavailable());
  return gpu_unavailable().empty();
}

void check_close(const Tensor& t, const std::vector<double>& expected, double atol, double rtol) {
  REQUIRE(t.defined());
  std::vector<double> v = t.to_vector<double>();
  REQUIRE_MESSAGE(v.size() == expected.size(),
                  "tensor has " << v.size() << " elements, expected " << expected.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double tol = atol + rtol * std::fabs(expected[i]);
    bool ok = v[i] == expected[i] || std::fabs(v[i] - expected[i]) <= tol ||
              (std::isnan(v[i]) && std::isnan(expected[i]));
    CHECK_MESSAGE(ok, "element " << i << ": got " << v[i] << ", expected " << expected[i]);
  }
}

void check_close(const Tensor& a, const Tensor& b, double atol, double rtol) {
  REQUIRE(a.shape() == b.shape());
  check_close(a, b.to_vector<double>(), atol, rtol);
}

void check_grad(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  GradcheckResult r = gradcheck(fn, inputs, opt);
  CHECK_MESSAGE(r.ok, r.message);
}

Tensor rand64(const Dims& shape, uint64_t seed, double scale, double shift) {
  Generator g(seed);
  Tensor t = ops::randn(shape, g, kFloat64) * scale + shift;
  t = t.detach();
  t.requires_grad_();
  return t;
}

std::string fixture(const std::string& name) { return std::string(VITRINE_FIXTURES) + "/" + name; }

TempDir::TempDir() {
  static int counter = 0;
  dir = std::filesystem::temp_directory_path() /
        fmt::format("vitrine_test_{}_{}", ::getpid(), counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

std::vector<std::string> TempDir::files() const {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

const nlohmann::json& fixture_json(const std::string& file) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(file);
  if (it == cache.end()) {
    std::ifstream in(fixture(file));
    REQUIRE_MESSAGE(in.good(), "cannot open fixture " << fixture(file));
    it = cache.emplace(file, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

Tensor fixture_tensor(const nlohmann::json& j, DType dtype) {
  Dims shape(j.at("shape").get<std::vector<int64_t>>());
  const nlohmann::json& v = j.contains("values") ? j.at("values") : j.at("data");
  if (dtype == kInt64) return ops::from_vector(v.get<std::vector<int64_t>>(), shape);
  return ops::from_vector(v.get<std::vector<double>>(), shape, dtype);
}

const nlohmann::json& fixture_case(const std::string& file, const std::string& name) {
  const auto& cases = fixture_json(file).at("cases");
  REQUIRE_MESSAGE(cases.contains(name), "fixture " << file << " has no case " << name);
  return cases.at(name);
}

RefCase load_case(const std::string& file, const std::string& name) {
  const nlohmann::json& j = fixture_case(file, name);
  RefCase c;
  for (const auto& in : j.at("inputs")) c.inputs.push_back(fixture_tensor(in));
  c.output = fixture_tensor(j.at("output"));
  return c;
}

void check_forward(const std::string& file, const std::string& name, const Fn& fn, double tol64,
                   double tol32) {
  RefCase c = load_case(file, name);
  auto expected = c.output.to_vector<double>();
  {
    INFO("float64");
    Tensor y = fn(c.inputs);
    CHECK(y.shape() == c.output.shape());
    check_close(y, expected, tol64, tol64);
  }
  {
    INFO("float32");
    std::vector<Tensor> in32;
    for (const Tensor& t : c.inputs) in32.push_back(t.to(kFloat32));
    Tensor y = fn(in32);
    CHECK(y.shape() == c.output.shape());
    check_close(y, expected, tol32, tol32);
  }
}

void check_grad_at(const std::string& file, const std::string& name, const Fn& fn,
                   GradcheckOptions opt) {
  RefCase c = load_case(file, name);
  for (Tensor& t : c.inputs) t.requires_grad_();
  check_grad(fn, c.inputs, opt);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

namespace {
void put_be32(std::ofstream& f, uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
  f.write(b, 4);
}
}  // namespace

void write_stripes(const std::string& dir, int train_n, int test_n) {
  std::filesystem::create_directories(dir);
  for (const auto& [prefix, n, seed] : {std::tuple{"train", train_n, 1u}, {"t10k", test_n, 2u}}) {
    std::ofstream im(dir + "/" + prefix + "-images-idx3-ubyte", std::ios::binary);
    std::ofstream lb(dir + "/" + prefix + "-labels-idx1-ubyte", std::ios::binary);
    put_be32(im, 0x803);
    put_be32(im, static_cast<uint32_t>(n));
    put_be32(im, 28);
    put_be32(im, 28);
    put_be32(lb, 0x801);
    put_be32(lb, static_cast<uint32_t>(n));
    uint32_t state = seed;
    for (int i = 0; i < n; ++i) {
      const int label = i % 10;
      lb.put(static_cast<char>(label));
      for (int y = 0; y < 28; ++y)
        for (int x = 0; x < 28; ++x) {
          state = state * 1664525u + 1013904223u;
          const bool in = (y / 2) % (label / 2 + 2) == 0 && (x / 2) % (label % 2 + 1) == 0;
          im.put(static_cast<char>(in ? 230 : (state >> 24) % 80));
        }
    }
  }
}

void write_png(const std::string& path, int w, int h, int comp, const std::vector<uint8_t>& hwc) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  REQUIRE(stbi_write_png(path.c_str(), w, h, comp, hwc.data(), w * comp) != 0);
}

void write_bmp(const std::string& path, int w, int h, int comp, const std::vector<uint8_t>& hwc) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  REQUIRE(stbi_write_bmp(path.c_str(), w, h, comp, hwc.data()) != 0);
}

void write_jpg(const std::string& path, int w, int h, int comp, const std::vector<uint8_t>& hwc) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  REQUIRE(stbi_write_jpg(path.c_str(), w, h, comp, hwc.data(), 100) != 0);
}

Process spawn_process(const std::string& exe, const std::vector<std::string>& args,
                      const std::string& log, const std::string& cwd) {
  std::vector<std::string> all = {exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = {"OMP_NUM_THREADS=1"};
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("OMP_NUM_THREADS=", 0) != 0) env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  Process p;
  pid_t pid = -1;
  // A bare name ("mpirun") is looked up in PATH.
  const bool bare = exe.find('/') == std::string::npos;
  REQUIRE((bare ? posix_spawnp : posix_spawn)(&pid, exe.c_str(), &fa, nullptr, argv.data(),
                                              envp.data()) == 0);
  posix_spawn_file_actions_destroy(&fa);
  p.pid = pid;
  return p;
}

int wait_process(Process p) {
  int status = 0;
  REQUIRE(waitpid(p.pid, &status, 0) == p.pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

ProcessResult run_process(const std::string& exe, const std::vector<std::string>& args,
                          const TempDir& dir, const std::string& name) {
  const std::string log = dir / (name + ".log");
  const int code = wait_process(spawn_process(exe, args, log, dir.dir.string()));
  return {code, read_text(log)};
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

std::vector<SummaryRow> summary_rows(const std::string& table) {
  std::vector<SummaryRow> rows;
  std::istringstream in(table);
  int rules = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("=")) {
      ++rules;
      continue;
    }
    if (rules != 2) continue;  // the header sits between the first two rules
    const size_t indent = line.find_first_not_of(' ');
    std::vector<std::string> cols;
    for (size_t i = indent; i < line.size();) {
      size_t gap = line.find("  ", i);
      cols.push_back(line.substr(i, gap - i));
      if (gap == std::string::npos) break;
      i = line.find_first_not_of(' ', gap);
    }
    REQUIRE_MESSAGE(cols.size() == 3, line);
    std::string digits;
    for (char ch : cols[2])
      if (ch != ',') digits += ch;
    rows.push_back(
        {static_cast<int>(indent / 2), cols[0], cols[1], cols[2] == "--" ? 0 : std::stoll(digits)});
  }
  return rows;
}

const SummaryRow& row_of(const std::vector<SummaryRow>& rows, const std::string& label) {
  auto it =
      std::find_if(rows.begin(), rows.end(), [&](const SummaryRow& r) { return r.label == label; });
  REQUIRE_MESSAGE(it != rows.end(), "no row " << label);
  return *it;
}

int64_t sum_params(const std::vector<SummaryRow>& rows) {
  int64_t n = 0;
  for (const SummaryRow& r : rows) n += r.params;
  return n;
}

std::vector<std::string> captures(const std::string& s, const std::string& re) {
  std::vector<std::string> out;
  const std::regex r(re);
  for (auto it = std::sregex_iterator(s.begin(), s.end(), r); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

void load_fixture_state(nn::Module& m, const nlohmann::json& state) {
  nn::NamedTensors named;
  for (auto& item : m.state_dict()) {
    auto& n = item.first;
    auto& t = item.second;
    INFO("fixture state " << n);
    REQUIRE(state.contains(n));
    named.emplace_back(n, fixture_tensor(state.at(n), t.dtype()));
  }
  CHECK(named.size() == state.size());
  nn::load_state_dict(m, named);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot write " << path);
  f << text;
  REQUIRE_MESSAGE(f.good(), "cannot write " << path);
}

}  // namespace vt_test
