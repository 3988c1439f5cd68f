"""The PyTorch twin of language_translation.cpp: pytorch/examples' language_translation
(src/model.py's Translator, src/data.py's masks, main.py's training and greedy decoding) on the
synthetic task of the C++ program (the target is the source reversed; no Multi30k download, no
spaCy), with its flags. Run: /usr/bin/python3 docs/examples/language_translation.py --epochs 2 \
  --batches 40 --batch 32 --embed_size 64 --attn_heads 4 --enc_layers 2 --dec_layers 2 \
  --dim_feedforward 128 --lr 1e-3
"""
import math
import time
from argparse import ArgumentParser

import torch
from torch import nn

UNK, PAD, BOS, EOS = 0, 1, 2, 3


def make_batch(n, symbols, min_len, max_len, gen):
    """src [S, n], tgt [S, n]: <bos> w_1 .. w_k <eos> and <bos> w_k .. w_1 <eos>, padded."""
    lens = torch.randint(min_len, max_len + 1, (n,), generator=gen).tolist()
    S = max(lens) + 2
    src = torch.full((S, n), PAD, dtype=torch.long)
    tgt = torch.full((S, n), PAD, dtype=torch.long)
    for b, k in enumerate(lens):
        words = torch.randint(4, 4 + symbols, (k,), generator=gen)
        src[:k + 2, b] = torch.cat([torch.tensor([BOS]), words, torch.tensor([EOS])])
        tgt[:k + 2, b] = torch.cat([torch.tensor([BOS]), words.flip(0), torch.tensor([EOS])])
    return src, tgt


def generate_square_subsequent_mask(size):
    mask = (torch.triu(torch.ones((size, size))) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))


def create_mask(src, tgt):
    tgt_mask = generate_square_subsequent_mask(tgt.shape[0])
    src_mask = torch.zeros((src.shape[0], src.shape[0])).type(torch.bool)
    return src_mask, tgt_mask, (src == PAD).transpose(0, 1), (tgt == PAD).transpose(0, 1)


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size, dropout, maxlen=5000):
        super(PositionalEncoding, self).__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding.unsqueeze(-2))

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


class Translator(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, embed_size, num_heads,
                 src_vocab_size, tgt_vocab_size, dim_feedforward, dropout):
        super(Translator, self).__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, embed_size)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, embed_size)
        self.pos_enc = PositionalEncoding(embed_size, dropout)
        self.transformer = nn.Transformer(
            d_model=embed_size, nhead=num_heads, num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
            dropout=dropout)
        self.ff = nn.Linear(embed_size, tgt_vocab_size)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                memory_key_padding_mask):
        src_emb = self.pos_enc(self.src_embedding(src))
        tgt_emb = self.pos_enc(self.tgt_embedding(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask,
                                tgt_padding_mask, memory_key_padding_mask)
        return self.ff(outs)

    def encode(self, src, src_mask, src_padding_mask):
        return self.transformer.encoder(self.pos_enc(self.src_embedding(src)), src_mask,
                                        src_padding_mask)

    def decode(self, tgt, memory, tgt_mask, memory_key_padding_mask):
        return self.transformer.decoder(self.pos_enc(self.tgt_embedding(tgt)), memory, tgt_mask,
                                        memory_key_padding_mask=memory_key_padding_mask)


def greedy_decode(model, src, max_len):
    """main.py's greedy_decode for all sentences at once (so with the source padding mask)."""
    src_mask, _, src_padding_mask, _ = create_mask(src, src)
    memory = model.encode(src, src_mask, src_padding_mask)
    ys = torch.full((1, src.size(1)), BOS, dtype=torch.long)
    done = torch.zeros(src.size(1), dtype=torch.bool)
    for _ in range(max_len - 1):
        out = model.decode(ys, memory, generate_square_subsequent_mask(ys.size(0)),
                           src_padding_mask)
        next_word = model.ff(out[-1]).argmax(dim=1)
        ys = torch.cat([ys, next_word.unsqueeze(0)], dim=0)
        done |= next_word == EOS
        if done.all():
            break
    return ys


def main():
    parser = ArgumentParser(prog="Machine Translator training (synthetic reversal)")
    parser.add_argument("-e", "--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--attn_heads", type=int, default=8)
    parser.add_argument("--enc_layers", type=int, default=5)
    parser.add_argument("--dec_layers", type=int, default=5)
    parser.add_argument("--embed_size", type=int, default=512)
    parser.add_argument("--dim_feedforward", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--dry_run", action="store_true")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--valid_size", type=int, default=200)
    parser.add_argument("--symbols", type=int, default=10)
    parser.add_argument("--min_len", type=int, default=2)
    parser.add_argument("--max_len", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    torch.manual_seed(opts.seed)
    data_gen = torch.Generator().manual_seed(opts.seed + 1)
    valid_gen = torch.Generator().manual_seed(opts.seed + 2)
    vocab_size = 4 + opts.symbols
    model = Translator(opts.enc_layers, opts.dec_layers, opts.embed_size, opts.attn_heads,
                       vocab_size, vocab_size, opts.dim_feedforward, opts.dropout)
    print("Translator: %d parameters, vocabulary %d" % (
        sum(p.numel() for p in model.parameters()), vocab_size))
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD)
    optim = torch.optim.Adam(model.parameters(), lr=opts.lr, betas=(0.9, 0.98), eps=1e-9)
    valid_src, valid_tgt = make_batch(opts.valid_size, opts.symbols, opts.min_len, opts.max_len,
                                      valid_gen)

    def step_loss(src, tgt):
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                       src_padding_mask)
        return loss_fn(logits.reshape(-1, logits.shape[-1]), tgt[1:, :].reshape(-1))

    for epoch in range(1, opts.epochs + 1):
        start_time = time.time()
        model.train()
        losses = 0
        n = 1 if opts.dry_run else opts.batches
        for _ in range(n):
            src, tgt = make_batch(opts.batch, opts.symbols, opts.min_len, opts.max_len, data_gen)
            loss = step_loss(src, tgt)
            optim.zero_grad()
            loss.backward()
            optim.step()
            losses += loss.item()
        epoch_time = time.time() - start_time
        model.eval()
        with torch.no_grad():
            val_loss = step_loss(valid_src, valid_tgt).item()
        print(f"Epoch: {epoch}\n\tTrain loss: {losses / n:.3f}\n\tVal loss: {val_loss:.3f}\n\t"
              f"Epoch time = {epoch_time:.1f} seconds")

    with torch.no_grad():
        ys = greedy_decode(model, valid_src, valid_src.size(0) + 5)
    right = total = exact = 0
    for b in range(opts.valid_size):
        ok_all = True
        for t in range(1, valid_tgt.size(0)):
            if valid_tgt[t, b] == PAD:
                break
            ok = t < ys.size(0) and bool(ys[t, b] == valid_tgt[t, b])
            right, total, ok_all = right + ok, total + 1, ok_all and ok
        exact += ok_all
    print("greedy decoding: token accuracy %.4f (%d/%d), sentences exact %d/%d" % (
        right / total, right, total, exact, opts.valid_size))


if __name__ == "__main__":
    main()
