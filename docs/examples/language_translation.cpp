// pytorch/examples' language_translation (main.py, src/model.py, src/data.py) in Vitrine: the
// Translator, token embeddings with sinusoidal positions feeding an encoder-decoder
// nn::Transformer and a linear layer to the target vocabulary, trained with cross-entropy that
// ignores padding, by Adam (betas 0.9, 0.98, eps 1e-9), then greedy decoding. The original
// translates Multi30k German to English (a download, spaCy tokenizers); here the "language pair"
// is synthetic and needs no download: the target is the source sequence reversed, which the
// decoder can only produce by attending to the encoder's memory (cross-attention) by position.
// Vocabulary and batches are built as data.py's: <unk> 0, <pad> 1, <bos> 2, <eos> 3, then the
// symbols; each sequence <bos> ... <eos>, padded to its batch's longest, sequence first [S, N];
// the masks as create_mask's. The validation set is decoded greedily (all sentences at once,
// so the decoder also gets the source's padding mask) and the token accuracy reported. Its
// PyTorch twin: language_translation.py, beside it. The test suite runs a small model briefly
// (ctest -R examples/language_translation).
//   example_language_translation [--epochs 30] [--batches 100] [--embed_size 512] [--check]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "nn/transformer.h"
#include "ops/sequence.h"

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
using vt::Tensor;

constexpr int64_t UNK = 0, PAD = 1, BOS = 2, EOS = 3;

// ---- data -------------------------------------------------------------------------------------

// n random sentences of min_len .. max_len symbols (ids 4 .. 4 + symbols - 1): src [S, n] and
// tgt [T, n], each column <bos> w_1 .. w_k <eos> (tgt: w_k .. w_1), padded with <pad>.
std::pair<Tensor, Tensor> make_batch(int64_t n, int64_t symbols, int64_t min_len, int64_t max_len,
                                     vt::Generator& gen) {
  const auto lens = ops::randint(min_len, max_len + 1, {n}, gen).to_vector<int64_t>();
  const int64_t S = *std::max_element(lens.begin(), lens.end()) + 2;
  std::vector<int64_t> src(S * n, PAD), tgt(S * n, PAD);
  for (int64_t b = 0; b < n; ++b) {
    const auto words = ops::randint(4, 4 + symbols, {lens[b]}, gen).to_vector<int64_t>();
    src[b] = tgt[b] = BOS;  // row 0
    for (int64_t i = 0; i < lens[b]; ++i) {
      src[(1 + i) * n + b] = words[i];
      tgt[(1 + i) * n + b] = words[lens[b] - 1 - i];
    }
    src[(lens[b] + 1) * n + b] = tgt[(lens[b] + 1) * n + b] = EOS;
  }
  return {ops::from_vector(src, {S, n}), ops::from_vector(tgt, {S, n})};
}

// [size, size]: 0 on and below the diagonal, -inf above (data.py's
// generate_square_subsequent_mask, PyTorch's nn.Transformer.generate_square_subsequent_mask)
Tensor square_subsequent_mask(int64_t size) {
  return nn::Transformer::generate_square_subsequent_mask(size);
}

// create_mask: src_mask (no restriction) [S, S], tgt_mask [T, T] (causal), and the padding
// masks [N, S], [N, T] (true: a <pad>, not attended to).
struct Masks {
  Tensor src_mask, tgt_mask, src_padding_mask, tgt_padding_mask;
};
Masks create_mask(const Tensor& src, const Tensor& tgt) {
  const auto pad = ops::full({1}, double(PAD), vt::kInt64);
  return {ops::zeros({src.size(0), src.size(0)}, vt::kBool), square_subsequent_mask(tgt.size(0)),
          ops::eq(src, pad).transpose(0, 1).contiguous(),
          ops::eq(tgt, pad).transpose(0, 1).contiguous()};
}

// ---- src/model.py -----------------------------------------------------------------------------

// x [S, N, E] -> dropout(x + pos_embedding[:S]), pos_embedding[p, 0, 2i] = sin(p / 10000^(2i /
// E)), [p, 0, 2i + 1] = cos(the same)
class PositionalEncoding : public nn::Module {
 public:
  PositionalEncoding(int64_t emb_size, double dropout, vt::Generator& gen, int64_t maxlen = 5000) {
    Tensor den = ops::exp(ops::arange(0, double(emb_size), 2, vt::kFloat32) *
                          (-std::log(10000.0) / double(emb_size)));
    Tensor angle = ops::arange(0, double(maxlen), 1, vt::kFloat32).unsqueeze(1) * den;
    Tensor pe = ops::stack({ops::sin(angle), ops::cos(angle)}, 2).reshape({maxlen, 1, emb_size});
    dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(dropout, gen));
    pos_embedding = register_buffer("pos_embedding", pe);
  }
  Tensor forward(const Tensor& x) override {
    return (*dropout_)(x + pos_embedding.narrow(0, 0, x.size(0)));
  }
  std::string type_name() const override { return "PositionalEncoding"; }
  std::shared_ptr<nn::Dropout> dropout_;
  Tensor pos_embedding;
};

class Translator : public nn::Module {
 public:
  Translator(int64_t num_encoder_layers, int64_t num_decoder_layers, int64_t embed_size,
             int64_t num_heads, int64_t src_vocab_size, int64_t tgt_vocab_size,
             int64_t dim_feedforward, double dropout, vt::Generator& gen) {
    src_embedding = register_module(
        "src_embedding", std::make_shared<nn::Embedding>(src_vocab_size, embed_size, gen));
    tgt_embedding = register_module(
        "tgt_embedding", std::make_shared<nn::Embedding>(tgt_vocab_size, embed_size, gen));
    pos_enc =
        register_module("pos_enc", std::make_shared<PositionalEncoding>(embed_size, dropout, gen));
    transformer = register_module(
        "transformer", std::make_shared<nn::Transformer>(embed_size, num_heads, num_encoder_layers,
                                                         num_decoder_layers, dim_feedforward,
                                                         dropout, "relu", 1e-5, false, false, gen));
    ff = register_module("ff", std::make_shared<nn::Linear>(embed_size, tgt_vocab_size, true, gen));
    for (const Tensor& p : parameters())  // _init_weights
      if (p.dim() > 1) nn::init::xavier_uniform_(p, 1, gen);
  }
  // src [S, N], trg [T, N] -> logits [T, N, tgt_vocab_size]
  using nn::Module::forward;
  Tensor forward(const Tensor& src, const Tensor& trg, const Masks& m) {
    Tensor src_emb = (*pos_enc)((*src_embedding)(src));
    Tensor tgt_emb = (*pos_enc)((*tgt_embedding)(trg));
    Tensor outs = transformer->forward(src_emb, tgt_emb, m.src_mask, m.tgt_mask, Tensor(),
                                       m.src_padding_mask, m.tgt_padding_mask, m.src_padding_mask);
    return (*ff)(outs);
  }
  // memory [S, N, E]
  Tensor encode(const Tensor& src, const Tensor& src_mask, const Tensor& src_padding_mask) {
    return transformer->encoder->forward((*pos_enc)((*src_embedding)(src)), src_mask,
                                         src_padding_mask);
  }
  // [T, N, E]
  Tensor decode(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                const Tensor& memory_key_padding_mask) {
    return transformer->decoder->forward((*pos_enc)((*tgt_embedding)(tgt)), memory, tgt_mask,
                                         Tensor(), Tensor(), memory_key_padding_mask);
  }
  std::string type_name() const override { return "Translator"; }

  std::shared_ptr<nn::Embedding> src_embedding, tgt_embedding;
  std::shared_ptr<PositionalEncoding> pos_enc;
  std::shared_ptr<nn::Transformer> transformer;
  std::shared_ptr<nn::Linear> ff;
};

// ---- main.py ----------------------------------------------------------------------------------

// main.py's greedy_decode for a batch: ys [<bos>; ...] grows by the likeliest next token of each
// sentence until every sentence has produced <eos> or max_len tokens are there. -> [len, N]
Tensor greedy_decode(Translator& model, const Tensor& src, int64_t max_len) {
  const Masks m = create_mask(src, src);
  const Tensor memory = model.encode(src, m.src_mask, m.src_padding_mask);
  const int64_t N = src.size(1);
  Tensor ys = ops::full({1, N}, double(BOS), vt::kInt64);
  std::vector<bool> done(N, false);
  for (int64_t i = 0; i < max_len - 1; ++i) {
    Tensor out = model.decode(ys, memory, square_subsequent_mask(ys.size(0)), m.src_padding_mask);
    Tensor prob = (*model.ff)(out.select(0, ys.size(0) - 1));  // [N, vocab]
    Tensor next_word = ops::argmax(prob, 1);                   // [N]
    ys = ops::cat({ys, next_word.unsqueeze(0)}, 0);
    const auto next = next_word.to_vector<int64_t>();
    for (int64_t b = 0; b < N; ++b) done[b] = done[b] || next[b] == EOS;
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  return ys;
}

int main(int argc, char** argv) {
  int64_t epochs = 30, batch = 128, attn_heads = 8, enc_layers = 5, dec_layers = 5;
  int64_t embed_size = 512, dim_feedforward = 512, batches = 100, valid_size = 200;
  int64_t symbols = 10, min_len = 2, max_len = 8;
  double lr = 1e-4, dropout = 0.1;
  uint64_t seed = 0;
  bool dry_run = false, check = false;

  CLI::App app{
      "pytorch/examples' language_translation: a Transformer learns to reverse "
      "sequences of random tokens."};
  app.add_option("-e,--epochs", epochs, "Epochs")->capture_default_str();
  app.add_option("--lr", lr, "Default learning rate")->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->capture_default_str();
  app.add_option("--attn_heads", attn_heads, "Number of attention heads")->capture_default_str();
  app.add_option("--enc_layers", enc_layers, "Number of encoder layers")->capture_default_str();
  app.add_option("--dec_layers", dec_layers, "Number of decoder layers")->capture_default_str();
  app.add_option("--embed_size", embed_size, "Size of the language embedding")
      ->capture_default_str();
  app.add_option("--dim_feedforward", dim_feedforward, "Feedforward dimensionality")
      ->capture_default_str();
  app.add_option("--dropout", dropout, "Transformer dropout")->capture_default_str();
  app.add_flag("--dry_run", dry_run, "one batch per epoch");
  app.add_option("--batches", batches, "random batches per epoch (the synthetic training set)")
      ->capture_default_str();
  app.add_option("--valid_size", valid_size, "validation sentences")->capture_default_str();
  app.add_option("--symbols", symbols, "distinct tokens besides the 4 special ones")
      ->capture_default_str();
  app.add_option("--min_len", min_len, "shortest sentence")->capture_default_str();
  app.add_option("--max_len", max_len, "longest sentence")->capture_default_str();
  app.add_option("--seed", seed, "seed of the data, the initialisation and the dropout")
      ->capture_default_str();
  app.add_flag("--check", check, "exit 1 unless the training loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    if (min_len < 1 || max_len < min_len) vt::fail("expected 1 <= --min_len <= --max_len");
    vt::Generator gen(seed), data_gen(seed + 1), valid_gen(seed + 2);
    const int64_t vocab_size = 4 + symbols;  // the same vocabulary on both sides
    Translator model(enc_layers, dec_layers, embed_size, attn_heads, vocab_size, vocab_size,
                     dim_feedforward, dropout, gen);
    std::printf("Translator: %ld parameters, vocabulary %ld\n", long(model.num_parameters()),
                long(vocab_size));
    // "These special values are from the 'Attention is all you need' paper"
    nn::optim::Adam optim(model.parameters(), {.lr = lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
    const auto [valid_src, valid_tgt] =
        make_batch(valid_size, symbols, min_len, max_len, valid_gen);

    // logits [T, N, V] against tgt[1:], <pad> ignored
    auto loss_fn = [&](const Tensor& logits, const Tensor& tgt_out) {
      return ops::cross_entropy(logits.reshape({-1, logits.size(-1)}), tgt_out.reshape({-1}),
                                ops::Reduction::Mean, 0.0, /*ignore_index=*/PAD);
    };
    auto step_loss = [&](const Tensor& src, const Tensor& tgt) {
      const Tensor tgt_input = tgt.narrow(0, 0, tgt.size(0) - 1);
      const Tensor tgt_out = tgt.narrow(0, 1, tgt.size(0) - 1);
      return loss_fn(model.forward(src, tgt_input, create_mask(src, tgt_input)), tgt_out);
    };

    double first_loss = -1, train_loss = 0;
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      const auto start = std::chrono::steady_clock::now();
      model.train();
      double losses = 0;
      int64_t n = 0;
      for (; n < (dry_run ? 1 : batches); ++n) {
        auto [src, tgt] = make_batch(batch, symbols, min_len, max_len, data_gen);
        Tensor loss = step_loss(src, tgt);
        optim.zero_grad();
        loss.backward();
        optim.step();
        if (first_loss < 0) first_loss = loss.item();
        losses += loss.item();
      }
      train_loss = losses / double(n);
      const double epoch_time =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      model.eval();
      vt::NoGradGuard no_grad;
      const double val_loss = step_loss(valid_src, valid_tgt).item();
      std::printf("Epoch: %ld\n\tTrain loss: %.3f\n\tVal loss: %.3f\n\tEpoch time = %.1f seconds\n",
                  long(epoch), train_loss, val_loss, epoch_time);
    }

    // Greedy decoding of the validation set; a target token counts as right when the decoded
    // token at its position equals it (<eos> included, <bos> and <pad> not).
    model.eval();
    vt::NoGradGuard no_grad;
    const Tensor ys = greedy_decode(model, valid_src, valid_src.size(0) + 5);
    const auto out = ys.to_vector<int64_t>(), want = valid_tgt.to_vector<int64_t>();
    const int64_t N = valid_size, T = valid_tgt.size(0), L = ys.size(0);
    int64_t right = 0, total = 0, exact = 0;
    for (int64_t b = 0; b < N; ++b) {
      bool all = true;
      for (int64_t t = 1; t < T && want[t * N + b] != PAD; ++t) {
        const bool ok = t < L && out[t * N + b] == want[t * N + b];
        right += ok, ++total, all = all && ok;
      }
      exact += all;
    }
    auto show = [&](const std::vector<int64_t>& v, int64_t rows, int64_t b) {
      std::string s;
      for (int64_t t = 0; t < rows && v[t * N + b] != PAD; ++t) {
        const int64_t id = v[t * N + b];
        s += id == BOS ? "<bos>" : id == EOS ? "<eos>" : id == UNK ? "<unk>" : std::to_string(id);
        s += ' ';
        if (id == EOS) break;
      }
      return s;
    };
    const auto src_v = valid_src.to_vector<int64_t>();
    for (int64_t b = 0; b < 3; ++b)
      std::printf("%s-> %s(want %s)\n", show(src_v, valid_src.size(0), b).c_str(),
                  show(out, L, b).c_str(), show(want, T, b).c_str());
    std::printf("greedy decoding: token accuracy %.4f (%ld/%ld), sentences exact %ld/%ld\n",
                double(right) / double(total), long(right), long(total), long(exact), long(N));
    std::printf("first batch loss %.4f, last epoch's mean %.4f\n", first_loss, train_loss);
    if (check && !(train_loss < first_loss)) {
      std::fprintf(stderr, "error: the training loss did not fall (%.4f -> %.4f)\n", first_loss,
                   train_loss);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
