#!/usr/bin/python3
"""word_language_model's speed in PyTorch, the twin of bench/word_lm.cpp (same model, sizes,
steps and measurement): pytorch/examples word_language_model's RNNModel / TransformerModel at its
defaults (emsize 200, nhid 200, 2 layers, dropout 0.2, bptt 35, batch 20), a 10000-word
vocabulary of random tokens, training as main.py's train() (log_softmax + NLLLoss, clip 0.25,
p.data.add_(p.grad, alpha=-lr)), generation as generate.py (one token at a time, multinomial on
exp(log-probabilities / 1.0)). Prints one JSON line.
  /usr/bin/python3 bench/word_lm_torch.py --model LSTM --what train --steps 20 --threads 2"""
import argparse, json, math, time
import torch
import torch.nn as nn
import torch.nn.functional as F


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return self.dropout(x + self.pe[:x.size(0), :])


class Model(nn.Module):
    def __init__(self, kind, ntoken, ninp, nhid, nlayers, dropout):
        super().__init__()
        self.kind, self.ninp = kind, ninp
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if kind == "Transformer":
            self.pos_encoder = PositionalEncoding(ninp, dropout)
            layer = nn.TransformerEncoderLayer(ninp, 2, nhid, dropout)
            self.transformer_encoder = nn.TransformerEncoder(layer, nlayers)
            self.decoder = nn.Linear(ninp, ntoken)
            self.mask = None
        else:
            if kind in ("LSTM", "GRU"):
                self.rnn = getattr(nn, kind)(ninp, nhid, nlayers, dropout=dropout)
            else:
                self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity="tanh", dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, tokens, hidden):
        if self.kind == "Transformer":
            T = tokens.size(0)
            if self.mask is None or self.mask.size(0) != T:
                self.mask = nn.Transformer.generate_square_subsequent_mask(T)
            x = self.pos_encoder(self.encoder(tokens) * math.sqrt(self.ninp))
            x = self.transformer_encoder(x, self.mask)
        else:
            x, hidden = self.rnn(self.drop(self.encoder(tokens)), hidden)
            x = self.drop(x)
            hidden = tuple(h.detach() for h in hidden) if isinstance(hidden, tuple) else hidden.detach()
        return F.log_softmax(self.decoder(x).view(-1, self.decoder.out_features), dim=1), hidden


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="LSTM")
    ap.add_argument("--what", default="train")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ntoken", type=int, default=10000)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1111)
    bptt, batch = 35, 20
    model = Model(a.model, a.ntoken, 200, 200, 2, 0.2)
    criterion = nn.NLLLoss()
    tokens = 0
    if a.what == "train":
        model.train()
        hidden = None
        for s in range(a.warmup + a.steps):
            if s == a.warmup:
                t0 = time.perf_counter()
            data = torch.randint(0, a.ntoken, (bptt + 1, batch))
            model.zero_grad()
            out, hidden = model(data[:bptt], hidden)
            loss = criterion(out, data[1:].reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-20.0)
            if s >= a.warmup:
                tokens += bptt * batch
    else:
        model.eval()
        hidden = None
        inp = torch.randint(0, a.ntoken, (1, 1))
        history = []
        with torch.no_grad():
            for s in range(a.warmup + a.steps):
                if s == a.warmup:
                    t0 = time.perf_counter()
                seq = inp
                if a.model == "Transformer":
                    history.append(inp)
                    seq = torch.cat(history, 0)
                out, hidden = model(seq, hidden)
                weights = out[-1].exp()
                inp = torch.multinomial(weights, 1).reshape(1, 1)
                if s >= a.warmup:
                    tokens += 1
    secs = time.perf_counter() - t0
    print(json.dumps({"side": "pytorch", "model": a.model, "what": a.what, "threads": a.threads,
                      "steps": a.steps, "tokens_per_s": round(tokens / secs, 1)}))


if __name__ == "__main__":
    main()
