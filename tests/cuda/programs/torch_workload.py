"""A small PyTorch workload whose results are compared with and without tally:
elementwise tensor ops, a cuBLAS matmul, a reduction, and a few training steps of
a small MLP. Prints one JSON object (exact float values as hex, so the
comparison can be bit-for-bit where the GPU computes deterministically)."""
import json
import os

# Deterministic cuBLAS (use_deterministic_algorithms below) needs a fixed workspace
# configuration set before cuBLAS starts; without it PyTorch refuses every matmul.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402


def hexes(t: torch.Tensor) -> list[str]:
    return [float(x).hex() for x in t.detach().double().cpu().flatten().tolist()]


def main() -> None:
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    out = {"device": torch.cuda.get_device_name(0)}

    a = torch.arange(4096, dtype=torch.float32, device=dev)
    b = torch.linspace(-1, 1, 4096, device=dev)
    out["elementwise"] = hexes((a * b + a.sin() - b.exp())[::257])
    out["sum"] = float((a * b).sum().item()).hex()

    x = torch.randn(256, 128, device=dev)
    w = torch.randn(128, 64, device=dev)
    out["matmul"] = hexes((x @ w)[::17, ::9])

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn(128, 32, device=dev)
    target = data[:, :1] * 0.5 - data[:, 1:2]
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()).hex())
    out["losses"] = losses
    out["pinned_roundtrip"] = bool(torch.equal(a.cpu().pin_memory().to(dev, non_blocking=True), a))
    torch.cuda.synchronize()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
