// word_language_model's speed in Vitrine (pytorch/examples word_language_model/main.py and
// generate.py, their default sizes): training tokens per second of the LSTM, GRU, RNN_TANH or
// Transformer model (emsize 200, nhid 200, 2 layers, dropout 0.2, bptt 35, batch 20, vocabulary
// 10000, clip 0.25, SGD lr 20 by hand, log_softmax + NLL as main.py), and generation tokens per
// second (one token at a time, batch 1, multinomial on exp(logits / 1.0), as generate.py). The
// tokens are random (speed does not depend on them). bench/word_lm_torch.py is its PyTorch twin;
// bench/word_lm.py runs both, alternating. Prints one JSON line per measurement.
//   g++ -O2 -std=c++20 -I. -Ibuild bench/word_lm.cpp -o /tmp/word_lm -Lbuild -lvitrine -lfmt
//   LD_LIBRARY_PATH=build /tmp/word_lm --model LSTM --what train --steps 20 --threads 2
#include <vitrine.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "nn/multihead_attention.h"
#include "nn/recurrent.h"
#include "nn/transformer.h"
#include "ops/sequence.h"

namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vitrine::Tensor;

struct Model : nn::Module {
  Model(const std::string& kind, int64_t ntoken, int64_t ninp, int64_t nhid, int64_t nlayers,
        double dropout, vitrine::Generator& gen)
      : kind(kind), ninp(ninp) {
    drop = register_module("drop", std::make_shared<nn::Dropout>(dropout, gen));
    encoder = register_module("encoder", std::make_shared<nn::Embedding>(ntoken, ninp, gen));
    const int64_t out = kind == "Transformer" ? ninp : nhid;
    if (kind == "Transformer") {
      nn::TransformerEncoderLayer layer(ninp, 2, nhid, dropout, "relu", 1e-5, false, false, gen);
      transformer = register_module("transformer_encoder",
                                    std::make_shared<nn::TransformerEncoder>(layer, nlayers));
      // PositionalEncoding: pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i + 1] = cos(...)
      const Tensor pos = ops::arange(0, 5000, 1, vitrine::kFloat32).unsqueeze(1);
      const Tensor div = ops::exp(ops::arange(0, static_cast<double>(ninp), 2, vitrine::kFloat32) *
                                  (-std::log(10000.0) / ninp));
      pe = ops::stack({ops::sin(pos * div), ops::cos(pos * div)}, 2).reshape({5000, 1, ninp});
    } else {
      nn::RnnOptions o(ninp, nhid);
      o.num_layers(nlayers).dropout(dropout);
      if (kind == "LSTM") rnn = register_module("rnn", std::make_shared<nn::LSTM>(o, gen));
      if (kind == "GRU") rnn = register_module("rnn", std::make_shared<nn::GRU>(o, gen));
      if (kind == "RNN_TANH") rnn = register_module("rnn", std::make_shared<nn::RNN>(o, gen));
      VT_CHECK(rnn, "unknown --model {}", kind);
    }
    decoder = register_module("decoder", std::make_shared<nn::Linear>(out, ntoken, true, gen));
    nn::init::uniform_(encoder->weight, -0.1, 0.1, gen);
    nn::init::uniform_(decoder->weight, -0.1, 0.1, gen);
    nn::init::zeros_(decoder->bias);
  }
  /// tokens [T, B] -> log-probabilities [T B, ntoken]
  Tensor run(const Tensor& tokens, nn::RnnState& state) {
    Tensor x;
    if (transformer) {
      const int64_t T = tokens.size(0);
      if (!mask.defined() || mask.size(0) != T)
        mask = nn::Transformer::generate_square_subsequent_mask(T);
      x = encoder->forward(tokens) * std::sqrt(static_cast<double>(ninp));
      x = drop->forward(x + pe.narrow(0, 0, T));
      x = transformer->forward(x, mask);
    } else {
      x = drop->forward(encoder->forward(tokens));
      nn::RnnOutput out = rnn->forward(x, state);
      state = {out.state.h.detach(), out.state.c.defined() ? out.state.c.detach() : Tensor()};
      x = drop->forward(out.output);
    }
    return ops::log_softmax(decoder->forward(x).reshape({-1, decoder->out_features}), 1);
  }
  std::string kind;
  int64_t ninp;
  Tensor pe, mask;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Embedding> encoder;
  std::shared_ptr<nn::RNNBase> rnn;
  std::shared_ptr<nn::TransformerEncoder> transformer;
  std::shared_ptr<nn::Linear> decoder;
};

int main(int argc, char** argv) {
  try {
    std::string kind = "LSTM", what = "train";
    int64_t steps = 20, warmup = 3, threads = 2, ntoken = 10000;
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--model")
        kind = v;
      else if (k == "--what")
        what = v;
      else if (k == "--steps")
        steps = std::stoll(v);
      else if (k == "--warmup")
        warmup = std::stoll(v);
      else if (k == "--threads")
        threads = std::stoll(v);
      else if (k == "--ntoken")
        ntoken = std::stoll(v);
      else
        throw vitrine::Error("unknown flag " + k);
    }
    vitrine::set_num_threads(static_cast<int>(threads));
    vitrine::Generator gen(1111);
    const int64_t bptt = 35, batch = 20;
    Model model(kind, ntoken, 200, 200, 2, 0.2, gen);
    double tokens = 0;
    auto t0 = std::chrono::steady_clock::now();
    if (what == "train") {
      model.train();
      const std::vector<Tensor> params = model.parameters();
      nn::RnnState state;
      for (int64_t s = 0; s < warmup + steps; ++s) {
        if (s == warmup) t0 = std::chrono::steady_clock::now();
        const Tensor data = ops::randint(0, ntoken, {bptt + 1, batch}, gen);
        const Tensor input = data.narrow(0, 0, bptt),
                     target = data.narrow(0, 1, bptt).reshape({-1});
        model.zero_grad();
        Tensor loss = nn::nll_loss(model.run(input, state), target);
        loss.backward();
        nn::optim::clip_grad_norm_(params, 0.25);
        vitrine::NoGradGuard ng;
        for (Tensor p : params) p.add_(p.grad(), -20.0);
        if (s >= warmup) tokens += bptt * batch;
      }
    } else {
      model.eval();
      vitrine::NoGradGuard ng;
      nn::RnnState state;
      Tensor input = ops::randint(0, ntoken, {1, 1}, gen);
      std::vector<Tensor> history;
      for (int64_t s = 0; s < warmup + steps; ++s) {
        if (s == warmup) t0 = std::chrono::steady_clock::now();
        Tensor seq = input;
        if (model.transformer) {  // generate.py feeds the whole sequence so far
          history.push_back(input);
          seq = ops::cat(history, 0);
        }
        const Tensor logp = model.run(seq, state);
        const Tensor weights = ops::exp(logp.select(0, logp.size(0) - 1));  // temperature 1
        input = ops::multinomial(weights, 1, false, gen).reshape({1, 1});
        if (s >= warmup) tokens += 1;
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "{\"side\": \"vitrine\", \"model\": \"%s\", \"what\": \"%s\", \"threads\": %lld, "
        "\"steps\": %lld, \"tokens_per_s\": %.1f}\n",
        kind.c_str(), what.c_str(), static_cast<long long>(threads), static_cast<long long>(steps),
        tokens / secs);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
