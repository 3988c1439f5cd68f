"""The explanation methods of bench/torch_bench.py's `--what explain` and `--self-check`, in
PyTorch (float32), as tests/fixtures/make_explain_fixtures.py computes them: attention maps,
rollout, gradient rollout, Chefer relevance, Grad-CAM, saliency, SmoothGrad, integrated gradients.
Imported by torch_bench.py; torch is imported only when a method runs."""

METHODS = ["attention", "rollout", "grad-rollout", "chefer", "gradcam", "saliency", "smoothgrad",
           "integrated-gradients"]
# explain/explain.h's Options defaults.
DISCARD_RATIO, SMOOTHGRAD_SAMPLES, SMOOTHGRAD_SIGMA, IG_STEPS = 0.9, 16, 0.15, 50


class Explainer:
    """Each method: image [1, C, H, W] -> its map on the patch grid [1, gh, gw]."""

    def __init__(self, model, patch, discard_ratio=DISCARD_RATIO, samples=SMOOTHGRAD_SAMPLES,
                 sigma=SMOOTHGRAD_SIGMA, ig_steps=IG_STEPS, black=0.0, noise=None):
        """black: the baseline's value in the model's input; noise: SmoothGrad's z [samples, C,
        H, W] (the self-check feeds the fixture's), else drawn per call from a seeded stream."""
        import numpy as np
        import torch
        self.torch = torch
        self.model = model
        self.patch = patch
        self.gh, self.gw = model.grid
        self.prefix = 1
        self.discard_ratio, self.samples, self.sigma, self.black = discard_ratio, samples, sigma, \
            black
        self.noise = noise
        nodes, weights = np.polynomial.legendre.leggauss(ig_steps)  # Captum's gauss_legendre
        self.ig_alphas = torch.tensor(0.5 * (1 + nodes), dtype=torch.float32)
        self.ig_weights = torch.tensor(0.5 * weights, dtype=torch.float32)
        self.noise_gen = torch.Generator().manual_seed(0)

    def cls_row(self, m):
        """The CLS row over the patches of [B, ..., N, N] as [B, ..., gh, gw]."""
        return m[..., 0, self.prefix:].reshape(*m.shape[:-2], self.gh, self.gw)

    def patch_mean(self, pixel_map):
        import torch.nn.functional as F
        return F.avg_pool2d(pixel_map[:, None], self.patch)[:, 0]

    def attention_pass(self, x):
        """A forward under no_grad, the attention probabilities kept."""
        self.model.keep_attention(True)
        try:
            with self.torch.no_grad():
                self.model(x)
            return self.model.attentions()
        finally:
            self.model.keep_attention(False)

    def gradient_pass(self, x, tokens_of=None):
        """The fixture's run_pass: forward with the attention probabilities (and, for gradcam,
        a block's norm1 output) kept, backward of the predicted class's logit."""
        kept = {}
        hook = None
        if tokens_of is not None:
            def keep_tokens(module, inputs, out):
                out.retain_grad()
                kept["tokens"] = out
            hook = tokens_of.register_forward_hook(keep_tokens)
        self.model.keep_attention(True)
        try:
            x = x.detach().clone().requires_grad_()
            logits = self.model(x)
            c = logits.argmax(-1)
            logits.gather(1, c[:, None]).sum().backward()
            return x, self.model.attentions(), kept.get("tokens")
        finally:
            self.model.keep_attention(False)
            if hook is not None:
                hook.remove()

    def rollout_of(self, fused_layers, ratio):
        """vit-explain's rollout with rows normalised, per image: fused_layers [B, N, N]."""
        torch = self.torch
        B, N = fused_layers[0].shape[0], fused_layers[0].shape[-1]
        eye = torch.eye(N)
        out = []
        for b in range(B):
            R = eye
            for fl in fused_layers:
                flat = fl[b].reshape(-1).clone()
                k = int(flat.numel() * ratio)
                if k > 0:
                    idx = flat.topk(k, largest=False).indices
                    flat[idx[idx != 0]] = 0
                a = (flat.view(N, N) + eye) / 2
                a = a / a.sum(dim=-1, keepdim=True)
                R = a @ R
            out.append(self.cls_row(R))
        return torch.stack(out)

    def attention(self, x):
        return self.cls_row(self.attention_pass(x)[-1]).mean(1)

    def rollout(self, x):
        return self.rollout_of([a.mean(1) for a in self.attention_pass(x)], self.discard_ratio)

    def grad_rollout(self, x):
        _, attn, _ = self.gradient_pass(x)
        with self.torch.no_grad():
            return self.rollout_of([(a.grad * a).mean(1).clamp(min=0) for a in attn],
                                   self.discard_ratio)

    def chefer(self, x):
        torch = self.torch
        _, attn, _ = self.gradient_pass(x)
        with torch.no_grad():
            B, N = attn[0].shape[0], attn[0].shape[-1]
            R = torch.eye(N).expand(B, N, N).clone()
            for a in attn:
                R = R + (a.grad * a).clamp(min=0).mean(1) @ R
            return self.cls_row(R)

    def gradcam(self, x):
        _, _, t = self.gradient_pass(x, tokens_of=self.model.blocks[-1].norm1)
        with self.torch.no_grad():
            def grid(v):  # pytorch-grad-cam's ViT reshape_transform: [B, N, D] -> [B, D, gh, gw]
                r = v[:, self.prefix:, :].reshape(v.shape[0], self.gh, self.gw, v.shape[2])
                return r.transpose(2, 3).transpose(1, 2)
            acts, grads = grid(t), grid(t.grad)
            weights = grads.mean(dim=(2, 3))
            return (weights[:, :, None, None] * acts).sum(dim=1).clamp(min=0)

    def saliency(self, x):
        xg, _, _ = self.gradient_pass(x)
        return self.patch_mean(xg.grad.abs().amax(1))

    def input_grads(self, images, c):
        """d y_c / d images for a batch of one image's variants."""
        torch = self.torch
        images = images.detach().requires_grad_()
        y = self.model(images)[:, c].sum()
        (g,) = torch.autograd.grad(y, images)
        return g

    def smoothgrad(self, x):
        torch = self.torch
        with torch.no_grad():
            c = int(self.model(x).argmax(-1)[0])
            rng = x.amax() - x.amin()
            z = self.noise if self.noise is not None else torch.randn(
                (self.samples,) + tuple(x.shape[1:]), generator=self.noise_gen)
            noisy = x + self.sigma * rng * z
        g = self.input_grads(noisy, c)
        attr = g.mean(0, keepdim=True)
        return self.patch_mean(attr.abs().sum(1))

    def integrated_gradients(self, x):
        torch = self.torch
        base = torch.full_like(x, self.black)  # black: 0 unless given (explain.h, Options.black)
        with torch.no_grad():
            logits = self.model(torch.cat([x, base]))
            c = int(logits[0].argmax())
            y_x, y_b = logits[0, c], logits[1, c]
            path = base + self.ig_alphas.view(-1, 1, 1, 1) * (x - base)  # [steps, C, H, W]
        g = self.input_grads(path, c)
        with torch.no_grad():
            attr = (x - base) * (self.ig_weights.view(-1, 1, 1, 1) * g).sum(0, keepdim=True)
            self.gap = float(attr.sum() - (y_x - y_b))  # Captum's convergence delta
            return self.patch_mean(attr.abs().sum(1))

    def method(self, name):
        return getattr(self, name.replace("-", "_"))
