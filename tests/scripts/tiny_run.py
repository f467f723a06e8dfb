"""The tiny model and data the OOM test scripts train (imported from their directory, which Python puts first
on sys.path when it runs a script): a linear classifier on 64 fixed points, through the runtime."""

import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 2)

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.lin(x), y)


def prepared(rt):
    """(model, optimizer, batches) set up and prepared by ``rt`` (a launcher.runtime.Runtime); ``batches``
    restores the checkpoint named by $CARDWISE_RESUME, so ``rt.step`` is where the run starts."""
    torch.manual_seed(0)
    xs = torch.randn(64, 8)
    data = torch.utils.data.TensorDataset(xs, (xs[:, 0] > 0).long())
    model = rt.setup_model(Tiny())
    model, opt, loader = rt.prepare(model, rt.optimizer(model), rt.dataloader(data))
    return model, opt, rt.batches(loader)
