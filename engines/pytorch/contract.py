"""The protocol's constants on this side: the contract's data (engines/protocol/contract.json: error reasons, update
defaults, limits, shared with the TypeScript side), the engine's own limits and names, and Fault, which every RPC
raises for a failure the contract names."""
import json
import os

import grpc
import torch

import checkpoint
from boot import PROTO_DIR

PROTOCOL_VERSION = 2
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHUNK_BYTES = 4 * 1024 * 1024 - 64 * 1024  # each chunk message within gRPC's default 4 MiB receive limit
with open(os.path.join(PROTO_DIR, "contract.json")) as _f:
    CONTRACT = json.load(_f)
MAX_TOKENS_LIMIT = CONTRACT["limits"]["maxTokens"]
INNER_STEPS_LIMIT = CONTRACT["limits"]["innerSteps"]
MODEL_KEY_LIMIT = CONTRACT["limits"]["modelKeyLength"]
REQUEST_ID_LIMIT = CONTRACT["limits"]["requestIdLength"]
MAX_VERSIONS_PER_MODEL = 64
MAX_REMEMBERED_UPDATES = 4096
PROGRESS_EVERY_S = 1.0

# Health names the checkpoint loader in use: this engine's own (checkpoint.py), never transformers'
ENGINE_NAME = f"troupe-pytorch 2 (torch {torch.__version__}; checkpoints: {checkpoint.LOADER})"
BATCH_INVARIANCE = ("bit-identical: Score, Generate's prefill and its decode run the same steps (16 to 240 rows: sizes probed "
                    "per spec to give every row the bits of a 64-row matmul; each row attends to its own sequence's cache slot "
                    "over a probed key length, the later keys masked), max_batch slots (fewer when memory is short), continuous "
                    "batching, concurrent calls of one version sharing them, and of LoRA adapters over one base (each row its "
                    "own adapter, unmerged: a per-row batched matmul of one shape); so a row's bits depend only on its "
                    "sequence and its adapter, and Generate's log-probs are Score's; Philox noise per sequence and token")
REASON_CODE = {reason: getattr(grpc.StatusCode, code) for reason, code in CONTRACT["errorReasons"].items()}
RPCS = ["InitModel", "LoadVersion", "ExportVersion", "LoadVersionChunks", "ExportVersionChunks", "Generate", "Score",
        "Update", "UpdateStream", "Abort", "Health", "Stats"]


class Fault(Exception):
    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason
        self.message = message


def invalid(message):
    return Fault("INVALID_REQUEST", message)
