#!/usr/bin/python3
"""GPT-2's speed and memory in PyTorch, the twin of bench/gpt.cpp (same model, sizes, steps and
measurement): nanoGPT's model.py at 6 layers, 6 heads, width 384, GPT-2's vocabulary 50257, tied
head, GELU (tanh), no dropout, on random tokens. PyTorch 1.13 has no scaled_dot_product_attention,
so the attention is nanoGPT's slow path (masked softmax of q k^T). Training: AdamW (lr 6e-4,
weight decay 0.1), clip 1.0, one step per batch [B, T]. Generation: nanoGPT's generate (the
whole context every token, no cache), temperature 1, top-k 200. Prints one JSON line with
tokens_per_s and peak_rss_mib (ru_maxrss: the process's peak).
  /usr/bin/python3 bench/gpt_torch.py --what train --T 64 --steps 5 --threads 2"""
import argparse, json, math, resource, time
import torch
import torch.nn as nn
import torch.nn.functional as F

V, L, H, C, BLOCK = 50257, 6, 6, 384, 1024


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def attn(self, x):
        B, T, _ = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (y.view(B, T, H, C // H).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")).softmax(-1)
        return self.attn_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(BLOCK, C)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0, 0.02)
                if getattr(m, "bias", None) is not None and isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)

    def forward(self, idx, last_only=False):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for b in self.h:
            x = b(x)
        x = self.ln_f(x)
        return self.lm_head(x[:, [-1], :] if last_only else x)  # nanoGPT: the last at inference


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", choices=["train", "generate"], default="train")
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT()
    if a.what == "train":
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
        x = torch.randint(0, V, (a.B, a.T))
        y = torch.randint(0, V, (a.B, a.T))

        def step():
            loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        step()  # warm-up
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        dt = time.perf_counter() - t0
        tokens = a.steps * a.B * a.T
    else:
        model.eval()
        idx = torch.randint(0, V, (1, a.T))
        with torch.no_grad():
            def generate(n):
                out = idx
                for _ in range(n):
                    logits = model(out[:, -BLOCK:], last_only=True)[:, -1, :]
                    v, _ = torch.topk(logits, 200)
                    logits[logits < v[:, [-1]]] = -float("inf")
                    out = torch.cat([out, torch.multinomial(logits.softmax(-1), 1)], 1)
                return out
            generate(2)
            t0 = time.perf_counter()
            generate(a.steps)
            dt = time.perf_counter() - t0
        tokens = a.steps
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"side": "pytorch", "what": a.what, "T": a.T, "tokens_per_s": tokens / dt,
                      "peak_rss_mib": round(rss, 1)}))


if __name__ == "__main__":
    main()
