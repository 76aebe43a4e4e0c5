"""Models of the co-location benchmark's PyTorch jobs, in plain torch.nn with
random weights (nothing is downloaded):

- BERT-base-shaped encoder: token + position + segment embeddings, LayerNorm,
  12 post-norm transformer layers (hidden 768, 12 heads, feed-forward 3072,
  GELU), pooler and a classification head. Dropout is 0 so that a device's
  output can be compared with the CPU's.
- ResNet-50: the bottleneck ResNet (stem 7x7/2 + max-pool, stages of 3, 4, 6
  and 3 bottleneck blocks with expansion 4, stride-2 first blocks from the second
  stage on, projection shortcuts where shapes change, global average pool, fc).
"""
from __future__ import annotations

import torch
from torch import nn


class BertEncoder(nn.Module):
    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, intermediate: int | None = None,
                 vocab: int = 30522, max_positions: int = 512, classes: int = 2):
        super().__init__()
        self.token = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_positions, hidden)
        self.segment = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        layer = nn.TransformerEncoderLayer(hidden, heads, intermediate or 4 * hidden, dropout=0.0,
                                           activation="gelu", batch_first=True, layer_norm_eps=1e-12)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token(ids) + self.position(positions) + self.segment(torch.zeros_like(ids))
        x = self.encoder(self.norm(x))
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inputs: int, width: int, stride: int):
        super().__init__()
        outputs = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, outputs, 1, bias=False), nn.BatchNorm2d(outputs))
        self.shortcut = nn.Identity() if stride == 1 and inputs == outputs else nn.Sequential(
            nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000, blocks: tuple[int, ...] = (3, 4, 6, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        stages, inputs = [], 64
        for i, count in enumerate(blocks):
            width = 64 * 2 ** i
            for j in range(count):
                stages.append(Bottleneck(inputs, width, stride=2 if i > 0 and j == 0 else 1))
                inputs = width * Bottleneck.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

