import torch


def quantize(x):
    xf = x.float()
    s = xf.abs().amax(dim=1).clamp_min(1e-8) / 127.0
    y = xf / s[:, None]
    q = torch.where(y >= 0, y + 0.5, y - 0.5).trunc().to(torch.int8)
    return q, s
