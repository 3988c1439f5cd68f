// Language models trained in PyTorch and converted with tools/convert/convert.py --by-name
// (tests/fixtures/make_lm_convert_fixture.py): word_language_model's LSTM RNNModel and its
// TransformerModel load by name into Vitrine models of the same structure and give PyTorch's
// logits (float32, 1e-5).
#include <cmath>
#include <nlohmann/json.hpp>

#include "nn/nn.h"
#include "nn/recurrent.h"
#include "nn/transformer.h"
#include "ops/sequence.h"
#include "test_util.h"

using namespace vitrine;
using namespace vt_test;
namespace nn = vitrine::nn;

namespace {

constexpr int64_t kTokens = 40, kInp = 8, kHid = 12;

struct LstmLM : nn::Module {
  LstmLM() {
    encoder = register_module("encoder", std::make_shared<nn::Embedding>(kTokens, kInp));
    rnn = register_module("rnn", std::make_shared<nn::LSTM>(kInp, kHid, 2, true, false, 0.2));
    decoder = register_module("decoder", std::make_shared<nn::Linear>(kHid, kTokens));
  }
  nn::RnnOutput run(const Tensor& tokens) {
    nn::RnnOutput out = rnn->forward(encoder->forward(tokens), nn::RnnState{});
    out.output = decoder->forward(out.output);
    return out;
  }
  std::shared_ptr<nn::Embedding> encoder;
  std::shared_ptr<nn::LSTM> rnn;
  std::shared_ptr<nn::Linear> decoder;
};

struct TransformerLM : nn::Module {
  TransformerLM() {
    encoder = register_module("encoder", std::make_shared<nn::Embedding>(kTokens, kInp));
    nn::TransformerEncoderLayer layer(kInp, 2, kHid, 0.2);
    transformer_encoder =
        register_module("transformer_encoder", std::make_shared<nn::TransformerEncoder>(layer, 2));
    decoder = register_module("decoder", std::make_shared<nn::Linear>(kInp, kTokens));
  }
  Tensor run(const Tensor& tokens) {
    const int64_t T = tokens.size(0);
    // PositionalEncoding: pe[pos, 2i] = sin(pos / 10000^(2i / d)), pe[pos, 2i + 1] = cos(...)
    const Tensor pos = ops::arange(0, static_cast<double>(T), 1, kFloat32).unsqueeze(1);
    const Tensor div = ops::exp(ops::arange(0, kInp, 2, kFloat32) * (-std::log(10000.0) / kInp));
    const Tensor pe =
        ops::stack({ops::sin(pos * div), ops::cos(pos * div)}, 2).reshape({T, 1, kInp});
    const Tensor x = encoder->forward(tokens) * std::sqrt(static_cast<double>(kInp)) + pe;
    const Tensor mask = nn::Transformer::generate_square_subsequent_mask(T);
    return decoder->forward(transformer_encoder->forward(x, mask));
  }
  std::shared_ptr<nn::Embedding> encoder;
  std::shared_ptr<nn::TransformerEncoder> transformer_encoder;
  std::shared_ptr<nn::Linear> decoder;
};

}  // namespace

TEST_CASE("convert --by-name: an LSTM language model trained in PyTorch gives PyTorch's logits") {
  const auto& fx = fixture_json("lm_convert.json");
  LstmLM model;
  nn::load_checkpoint(fixture("lm_lstm.safetensors"), model);
  model.eval();
  const Tensor tokens = ops::to_dtype(fixture_tensor(fx.at("tokens")), kInt64);
  nn::RnnOutput out = model.run(tokens);
  check_close(out.output, fixture_tensor(fx.at("lstm").at("logits"), kFloat32), 1e-5, 1e-5);
  check_close(out.state.h, fixture_tensor(fx.at("lstm").at("h_n"), kFloat32), 1e-5, 1e-5);
  check_close(out.state.c, fixture_tensor(fx.at("lstm").at("c_n"), kFloat32), 1e-5, 1e-5);
}

TEST_CASE(
    "convert --by-name: a Transformer language model trained in PyTorch gives PyTorch's logits") {
  const auto& fx = fixture_json("lm_convert.json");
  TransformerLM model;
  nn::load_checkpoint(fixture("lm_transformer.safetensors"), model);
  model.eval();
  const Tensor tokens = ops::to_dtype(fixture_tensor(fx.at("tokens")), kInt64);
  check_close(model.run(tokens), fixture_tensor(fx.at("transformer").at("logits"), kFloat32), 1e-5,
              1e-5);
}
