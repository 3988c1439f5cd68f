// pytorch/examples' word_language_model (main.py, model.py, data.py, generate.py) in Vitrine: a
// word-level language model, an embedding, a recurrent stack (--model RNN_TANH, RNN_RELU, LSTM,
// GRU) or a causal Transformer encoder (--model Transformer), and a linear decoder to
// log-probabilities; trained by truncated back-propagation through time (bptt) with plain SGD at
// lr 20, gradients clipped to norm 0.25, the lr divided by 4 whenever the validation loss does not
// improve; the best model is saved, reloaded and measured on the test split; then it writes
// text, drawing each word from softmax(logits / temperature). The text: train.txt, valid.txt and
// test.txt of --data DIR (Wikitext-2's layout), or by default Vitrine's own docs/*.md, whose
// lines split 80/10/10. Its PyTorch twin: word_language_model.py, beside it. The test suite runs
// a few batches of the LSTM and the Transformer (ctest -R examples/word_language_model).
//   example_word_language_model [--model LSTM] [--epochs 40] [--max-batches 0] [--check] [--help]
#include <vitrine.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "nn/recurrent.h"
#include "nn/transformer.h"
#include "ops/sequence.h"

namespace vt = vitrine;
namespace nn = vitrine::nn;
namespace ops = vitrine::ops;
namespace fs = std::filesystem;
using vt::Tensor;

// ---- data.py ----------------------------------------------------------------------------------

struct Dictionary {
  std::unordered_map<std::string, int64_t> word2idx;
  std::vector<std::string> idx2word;
  int64_t add_word(const std::string& word) {
    auto [it, added] = word2idx.try_emplace(word, int64_t(idx2word.size()));
    if (added) idx2word.push_back(word);
    return it->second;
  }
  int64_t size() const { return int64_t(idx2word.size()); }
};

// Each line's words (split on ASCII whitespace, as Python's str.split for ASCII text) and "<eos>".
std::vector<int64_t> tokenize(const std::vector<std::string>& lines, Dictionary& dictionary) {
  std::vector<int64_t> ids;
  for (const std::string& line : lines) {
    size_t i = 0;
    while (true) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      if (i == line.size()) break;
      size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      ids.push_back(dictionary.add_word(line.substr(i, j - i)));
      i = j;
    }
    ids.push_back(dictionary.add_word("<eos>"));
  }
  return ids;
}

std::vector<std::string> read_lines(const fs::path& file) {
  std::ifstream in(file);
  if (!in) vt::fail("word_language_model: cannot read {}", file.string());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// data.py's Corpus: the dictionary grows over train, valid, test in turn.
struct Corpus {
  Dictionary dictionary;
  std::vector<int64_t> train, valid, test;
  explicit Corpus(const std::string& data_dir, const fs::path& docs) {
    std::vector<std::string> parts[3];
    if (!data_dir.empty()) {
      parts[0] = read_lines(fs::path(data_dir) / "train.txt");
      parts[1] = read_lines(fs::path(data_dir) / "valid.txt");
      parts[2] = read_lines(fs::path(data_dir) / "test.txt");
    } else {  // every docs/*.md in name order, its lines split 80 / 10 / 10
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(docs))
        if (entry.path().extension() == ".md") files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      if (files.empty()) vt::fail("word_language_model: no .md files in {}", docs.string());
      std::vector<std::string> lines;
      for (const auto& f : files)
        for (auto& line : read_lines(f)) lines.push_back(std::move(line));
      const size_t a = lines.size() * 8 / 10, b = lines.size() * 9 / 10;
      parts[0].assign(lines.begin(), lines.begin() + a);
      parts[1].assign(lines.begin() + a, lines.begin() + b);
      parts[2].assign(lines.begin() + b, lines.end());
    }
    train = tokenize(parts[0], dictionary);
    valid = tokenize(parts[1], dictionary);
    test = tokenize(parts[2], dictionary);
  }
};

// The sequence cut into bsz columns, [nbatch, bsz]: column b holds words b nbatch ..; the rest
// that does not fit is dropped.
Tensor batchify(const std::vector<int64_t>& data, int64_t bsz) {
  const int64_t nbatch = int64_t(data.size()) / bsz;
  if (nbatch < 2) vt::fail("word_language_model: {} words make no batch of {}", data.size(), bsz);
  std::vector<int64_t> kept(data.begin(), data.begin() + nbatch * bsz);
  return ops::from_vector(kept, {bsz, nbatch}).transpose(0, 1).contiguous();
}

// Rows i .. i + seq_len of source [N, B] and the words that follow them, flattened [seq_len B].
std::pair<Tensor, Tensor> get_batch(const Tensor& source, int64_t i, int64_t bptt) {
  const int64_t seq_len = std::min(bptt, source.size(0) - 1 - i);
  return {source.narrow(0, i, seq_len), source.narrow(0, i + 1, seq_len).reshape({-1})};
}

// ---- model.py ---------------------------------------------------------------------------------

// An embedding, a recurrent stack and a decoder: input [S, B] -> log-probabilities [S B, ntoken].
class RNNModel : public nn::Module {
 public:
  RNNModel(const std::string& rnn_type, int64_t ntoken, int64_t ninp, int64_t nhid, int64_t nlayers,
           double dropout, bool tie_weights, vt::Generator& gen)
      : rnn_type(rnn_type), ntoken(ntoken), nhid(nhid), nlayers(nlayers) {
    drop = register_module("drop", std::make_shared<nn::Dropout>(dropout, gen));
    encoder = register_module("encoder", std::make_shared<nn::Embedding>(ntoken, ninp, gen));
    const auto options = nn::RnnOptions(ninp, nhid).num_layers(nlayers).dropout(dropout);
    if (rnn_type == "LSTM")
      rnn = register_module("rnn", std::make_shared<nn::LSTM>(options, gen));
    else if (rnn_type == "GRU")
      rnn = register_module("rnn", std::make_shared<nn::GRU>(options, gen));
    else if (rnn_type == "RNN_TANH" || rnn_type == "RNN_RELU")
      rnn = register_module(
          "rnn",
          std::make_shared<nn::RNN>(
              nn::RnnOptions(options).nonlinearity(rnn_type == "RNN_TANH" ? "tanh" : "relu"), gen));
    else
      vt::fail("--model {}: expected LSTM, GRU, RNN_TANH, RNN_RELU or Transformer", rnn_type);
    // init_weights: both U(-0.1, 0.1), the bias 0. Tied (Press & Wolf 2016; Inan et al. 2016),
    // the decoder's weight is the embedding's: one parameter, listed once.
    nn::init::uniform_(encoder->weight, -0.1, 0.1, gen);
    if (tie_weights) {
      if (nhid != ninp) vt::fail("When using the tied flag, nhid must be equal to emsize");
      decoder = register_module("decoder", std::make_shared<nn::Module>());
      decoder_weight = decoder->register_parameter("weight", encoder->weight);
      decoder_bias = decoder->register_parameter("bias", ops::zeros({ntoken}));
    } else {
      auto linear = std::make_shared<nn::Linear>(nhid, ntoken, true, gen);
      decoder = register_module("decoder", linear);
      decoder_weight = linear->weight, decoder_bias = linear->bias;
      nn::init::zeros_(decoder_bias);
      nn::init::uniform_(decoder_weight, -0.1, 0.1, gen);
    }
  }
  using nn::Module::forward;
  std::pair<Tensor, nn::RnnState> forward(const Tensor& input, const nn::RnnState& hidden) {
    Tensor emb = (*drop)((*encoder)(input));        // [S, B, ninp]
    nn::RnnOutput out = rnn->forward(emb, hidden);  // output [S, B, nhid]
    Tensor decoded = ops::linear((*drop)(out.output), decoder_weight, decoder_bias);
    return {ops::log_softmax(decoded.reshape({-1, ntoken}), 1), out.state};
  }
  // Zeros, [nlayers, bsz, nhid] (and an LSTM's cell state).
  nn::RnnState init_hidden(int64_t bsz) const {
    Tensor zeros = ops::zeros({nlayers, bsz, nhid});
    return {zeros, rnn_type == "LSTM" ? ops::zeros({nlayers, bsz, nhid}) : Tensor()};
  }
  std::string type_name() const override { return "RNNModel"; }

  std::string rnn_type;
  int64_t ntoken, nhid, nlayers;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Embedding> encoder;
  std::shared_ptr<nn::RNNBase> rnn;
  std::shared_ptr<nn::Module> decoder;
  Tensor decoder_weight, decoder_bias;
};

// pe[pos, 0, 2i] = sin(pos / 10000^(2i / d_model)), pe[pos, 0, 2i + 1] = cos(the same);
// x [S, B, d_model] -> dropout(x + pe[:S]).
class PositionalEncoding : public nn::Module {
 public:
  PositionalEncoding(int64_t d_model, double dropout, vt::Generator& gen, int64_t max_len = 5000) {
    dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(dropout, gen));
    Tensor position = ops::arange(0, double(max_len), 1, vt::kFloat32).unsqueeze(1);  // [L, 1]
    Tensor div_term =
        ops::exp(ops::arange(0, double(d_model), 2, vt::kFloat32) * (-std::log(10000.0) / d_model));
    Tensor angle = position * div_term;  // [L, d_model / 2]
    Tensor pe = ops::stack({ops::sin(angle), ops::cos(angle)}, 2).reshape({max_len, 1, d_model});
    this->pe = register_buffer("pe", pe);
  }
  Tensor forward(const Tensor& x) override { return (*dropout_)(x + pe.narrow(0, 0, x.size(0))); }
  std::string type_name() const override { return "PositionalEncoding"; }
  std::shared_ptr<nn::Dropout> dropout_;
  Tensor pe;
};

// model.py's TransformerModel: src [S, B] -> log-probabilities [S, B, ntoken], position s
// attending to positions <= s. PyTorch's class derives from nn.Transformer and replaces its
// decoder by the Linear, so what remains is nn.Transformer's encoder (its layers' dropout 0.1,
// its final LayerNorm, weights xavier_uniform_), built here directly.
class TransformerModel : public nn::Module {
 public:
  TransformerModel(int64_t ntoken, int64_t ninp, int64_t nhead, int64_t nhid, int64_t nlayers,
                   double dropout, vt::Generator& gen)
      : ninp(ninp) {
    nn::TransformerEncoderLayer layer(ninp, nhead, nhid, /*dropout=*/0.1, "relu", 1e-5,
                                      /*batch_first=*/false, /*norm_first=*/false, gen);
    encoder =
        register_module("encoder", std::make_shared<nn::TransformerEncoder>(
                                       layer, nlayers, std::make_shared<nn::LayerNorm>(ninp)));
    for (const Tensor& p : encoder->parameters())
      if (p.dim() > 1) nn::init::xavier_uniform_(p, 1, gen);
    pos_encoder =
        register_module("pos_encoder", std::make_shared<PositionalEncoding>(ninp, dropout, gen));
    input_emb = register_module("input_emb", std::make_shared<nn::Embedding>(ntoken, ninp, gen));
    decoder = register_module("decoder", std::make_shared<nn::Linear>(ninp, ntoken, true, gen));
    nn::init::uniform_(input_emb->weight, -0.1, 0.1, gen);
    nn::init::zeros_(decoder->bias);
    nn::init::uniform_(decoder->weight, -0.1, 0.1, gen);
  }
  Tensor forward(const Tensor& src, bool has_mask) {
    Tensor mask;  // [S, S]: 0 on and below the diagonal, -inf above
    if (has_mask) mask = nn::Transformer::generate_square_subsequent_mask(src.size(0));
    Tensor x = (*pos_encoder)(input_emb->forward(src) * std::sqrt(double(ninp)));  // [S, B, ninp]
    return ops::log_softmax((*decoder)(encoder->forward(x, mask)), -1);
  }
  Tensor forward(const Tensor& src) override { return forward(src, true); }
  std::string type_name() const override { return "TransformerModel"; }

  int64_t ninp;
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<PositionalEncoding> pos_encoder;
  std::shared_ptr<nn::Embedding> input_emb;
  std::shared_ptr<nn::Linear> decoder;
};

// ---- main.py and generate.py ------------------------------------------------------------------

int main(int argc, char** argv) {
  std::string data_dir, model_type = "LSTM", save = "model.safetensors", outf = "generated.txt";
  int64_t emsize = 200, nhid = 200, nlayers = 2, epochs = 40, batch_size = 20, bptt = 35;
  int64_t log_interval = 200, nhead = 2, max_batches = 0, words = 1000;
  double lr = 20, clip = 0.25, dropout = 0.2, temperature = 1.0;
  uint64_t seed = 1111;
  bool tied = false, check = false;

  CLI::App app{"pytorch/examples' word_language_model: RNN/LSTM/GRU/Transformer language model."};
  app.add_option("--data", data_dir,
                 "folder of train.txt, valid.txt, test.txt (default: "
                 "Vitrine's docs/*.md)");
  app.add_option("--model", model_type, "RNN_TANH, RNN_RELU, LSTM, GRU, Transformer")
      ->capture_default_str();
  app.add_option("--emsize", emsize, "size of word embeddings")->capture_default_str();
  app.add_option("--nhid", nhid, "number of hidden units per layer")->capture_default_str();
  app.add_option("--nlayers", nlayers, "number of layers")->capture_default_str();
  app.add_option("--lr", lr, "initial learning rate")->capture_default_str();
  app.add_option("--clip", clip, "gradient clipping")->capture_default_str();
  app.add_option("--epochs", epochs, "upper epoch limit")->capture_default_str();
  app.add_option("--batch_size", batch_size, "batch size")->capture_default_str();
  app.add_option("--bptt", bptt, "sequence length")->capture_default_str();
  app.add_option("--dropout", dropout, "dropout applied to layers (0 = no dropout)")
      ->capture_default_str();
  app.add_flag("--tied", tied, "tie the word embedding and softmax weights");
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--log-interval", log_interval, "report interval")->capture_default_str();
  app.add_option("--save", save, "path to save the final model")->capture_default_str();
  app.add_option("--nhead", nhead, "the number of heads in the transformer model")
      ->capture_default_str();
  app.add_option("--max-batches", max_batches,
                 "stop each epoch after this many batches (0: "
                 "all; the original's --dry-run is 1)")
      ->capture_default_str();
  app.add_option("--words", words, "number of words to generate (generate.py)")
      ->capture_default_str();
  app.add_option("--temperature", temperature, "higher will increase diversity")
      ->capture_default_str();
  app.add_option("--outf", outf, "output file for generated text")->capture_default_str();
  app.add_flag("--check", check, "exit 1 unless the training loss fell");
  CLI11_PARSE(app, argc, argv);

  try {
    if (temperature < 1e-3) vt::fail("--temperature has to be greater or equal 1e-3.");
    vt::Generator gen(seed);  // torch.manual_seed(args.seed) (Vitrine's draws)
    const Corpus corpus(data_dir, fs::path(__FILE__).parent_path().parent_path());
    const int64_t eval_batch_size = 10, ntokens = corpus.dictionary.size();
    const Tensor train_data = batchify(corpus.train, batch_size);
    const Tensor val_data = batchify(corpus.valid, eval_batch_size);
    const Tensor test_data = batchify(corpus.test, eval_batch_size);
    std::printf("corpus: %zu / %zu / %zu words, %ld in the dictionary\n", corpus.train.size(),
                corpus.valid.size(), corpus.test.size(), long(ntokens));

    const bool transformer = model_type == "Transformer";
    std::shared_ptr<nn::Module> model;
    std::shared_ptr<RNNModel> rnn_model;
    std::shared_ptr<TransformerModel> tf_model;
    if (transformer)
      model = tf_model =
          std::make_shared<TransformerModel>(ntokens, emsize, nhead, nhid, nlayers, dropout, gen);
    else
      model = rnn_model = std::make_shared<RNNModel>(model_type, ntokens, emsize, nhid, nlayers,
                                                     dropout, tied, gen);
    std::printf("%s: %ld parameters\n", model_type.c_str(), long(model->num_parameters()));

    // One chunk of bptt rows: log-probabilities [S B, ntokens]; an RNN carries its state from
    // chunk to chunk, detached (repackage_hidden), so back-propagation stops at the chunk.
    auto run = [&](const Tensor& data, nn::RnnState& hidden) {
      if (transformer) return tf_model->forward(data, true).reshape({-1, ntokens});
      hidden = {hidden.h.detach(), hidden.c.defined() ? hidden.c.detach() : Tensor()};
      auto [output, state] = rnn_model->forward(data, hidden);
      hidden = state;
      return output;
    };
    auto evaluate = [&](const Tensor& data_source) {
      model->eval();
      vt::NoGradGuard no_grad;
      double total_loss = 0;
      nn::RnnState hidden = transformer ? nn::RnnState{} : rnn_model->init_hidden(eval_batch_size);
      for (int64_t i = 0; i < data_source.size(0) - 1; i += bptt) {
        auto [data, targets] = get_batch(data_source, i, bptt);
        total_loss += double(data.size(0)) * nn::nll_loss(run(data, hidden), targets).item();
      }
      return total_loss / double(data_source.size(0) - 1);
    };

    double first_loss = -1, last_epoch_loss = 0;
    auto train = [&](int64_t epoch) {
      model->train();
      double total_loss = 0, epoch_loss = 0;
      int64_t batches = 0;
      auto start = std::chrono::steady_clock::now();
      nn::RnnState hidden = transformer ? nn::RnnState{} : rnn_model->init_hidden(batch_size);
      for (int64_t batch = 0, i = 0; i < train_data.size(0) - 1; ++batch, i += bptt) {
        if (max_batches > 0 && batch == max_batches) break;
        auto [data, targets] = get_batch(train_data, i, bptt);
        model->zero_grad();
        Tensor loss = nn::nll_loss(run(data, hidden), targets);
        loss.backward();
        // clip_grad_norm_ helps prevent the exploding gradient problem in RNNs / LSTMs.
        nn::optim::clip_grad_norm_(model->parameters(), clip);
        {
          vt::NoGradGuard no_grad;  // p = p - lr grad
          for (Tensor& p : model->parameters())
            if (p.grad().defined()) p.add_(p.grad(), -lr);
        }
        const double value = loss.item();
        if (first_loss < 0) first_loss = value;
        total_loss += value, epoch_loss += value, ++batches;
        if (batch % log_interval == 0 && batch > 0) {
          const double cur_loss = total_loss / double(log_interval);
          const double ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
          std::printf(
              "| epoch %3ld | %5ld/%5ld batches | lr %02.2f | ms/batch %5.2f | loss %5.2f "
              "| ppl %8.2f\n",
              long(epoch), long(batch), long(train_data.size(0) / bptt), lr,
              ms / double(log_interval), cur_loss, std::exp(cur_loss));
          total_loss = 0;
          start = std::chrono::steady_clock::now();
        }
      }
      last_epoch_loss = epoch_loss / double(batches);
    };

    // Loop over epochs; keep the best model by validation loss, anneal lr otherwise.
    double best_val_loss = INFINITY;
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      const auto epoch_start = std::chrono::steady_clock::now();
      train(epoch);
      const double val_loss = evaluate(val_data);
      std::printf(
          "%s\n| end of epoch %3ld | time: %5.2fs | valid loss %5.2f | valid ppl %8.2f\n"
          "%s\n",
          std::string(89, '-').c_str(), long(epoch),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count(),
          val_loss, std::exp(val_loss), std::string(89, '-').c_str());
      if (val_loss < best_val_loss) {
        nn::save_checkpoint(save, *model);
        best_val_loss = val_loss;
      } else {
        lr /= 4.0;
      }
    }
    // Load the best saved model; run on test data.
    nn::load_checkpoint(save, *model);
    const double test_loss = evaluate(test_data);
    std::printf("%s\n| End of training | test loss %5.2f | test ppl %8.2f\n%s\n",
                std::string(89, '=').c_str(), test_loss, std::exp(test_loss),
                std::string(89, '=').c_str());

    // generate.py: from a random first word, each next word drawn from softmax(output / T).
    model->eval();
    vt::NoGradGuard no_grad;
    std::ofstream out(outf);
    Tensor input = ops::randint(0, ntokens, {1, 1}, gen);
    nn::RnnState hidden = transformer ? nn::RnnState{} : rnn_model->init_hidden(1);
    for (int64_t i = 0; i < words; ++i) {
      // generate.py runs the Transformer without its mask (has_mask False); the causal mask it
      // was trained with is kept here (the last position's output is the one used either way,
      // but without the mask earlier positions of deeper layers see later words).
      Tensor output = transformer ? tf_model->forward(input, true).select(0, input.size(0) - 1)
                                  : run(input, hidden);
      Tensor word_weights = ops::exp(output.reshape({-1}) / temperature);
      const int64_t word_idx = ops::multinomial(word_weights, 1, false, gen).item<int64_t>();
      input = transformer ? ops::cat({input, ops::full({1, 1}, double(word_idx), vt::kInt64)}, 0)
                          : ops::full({1, 1}, double(word_idx), vt::kInt64);
      const std::string& word = corpus.dictionary.idx2word[word_idx];
      out << word << (i % 20 == 19 ? '\n' : ' ');
      if (i < 40) std::printf("%s%s", word.c_str(), i % 20 == 19 ? "\n" : " ");
    }
    std::printf("\n(%ld words written to %s)\n", long(words), outf.c_str());

    std::printf("first batch loss %.4f, last epoch's mean %.4f\n", first_loss, last_epoch_loss);
    if (check && !(last_epoch_loss < first_loss)) {
      std::fprintf(stderr, "error: the training loss did not fall (%.4f -> %.4f)\n", first_loss,
                   last_epoch_loss);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
