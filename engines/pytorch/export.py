"""A stored version of a transformers-layout model (a spec with `hf`, which only this engine computes) as a
Hugging Face directory, for `troupe export-model` (activities/store/model-export.ts):

    python export.py SPEC_FILE WEIGHTS_FILE OUT             θ (float32, little-endian) of a full model
    python export.py SPEC_FILE - OUT --adapter ADAPTER_DIR   a LoRA version: the PEFT adapter directory the
                                                             caller wrote, merged into lora.baseCheckpoint

transformers' own save_pretrained writes config.json and model.safetensors (float32, as Troupe trains), so
whatever loads transformers checkpoints (vLLM, SGLang, transformers) loads it. A LoRA version is merged by
PEFT's merge_and_unload, the same code that serves the adapter unmerged. Prints {"files": [...], "dtype": "F32"}
on stdout; a bad input exits 2 with one line naming it.
"""
import json
import os
import sys

import numpy as np
import torch

import hf


def _full(spec, weights_file):
    runtime = hf.runtime_for(spec, "cpu")
    theta = torch.from_numpy(np.fromfile(weights_file, dtype="<f4").copy())
    if theta.numel() != runtime.P:
        raise hf.HfSpecError(f"weights: {theta.numel()} values, spec.hf's model has {runtime.P}")
    # the module's parameters are on the meta device (build_module): θ's views take their place
    W = {n: w.contiguous() for n, w in runtime.weights(theta).items()}
    model = runtime.module
    missing, unexpected = model.load_state_dict(W, strict=False, assign=True)
    if unexpected:
        raise hf.HfSpecError(f"weights: tensor {unexpected[0]} has no place in spec.hf's model")
    model.tie_weights()
    still_meta = [n for n, p in model.named_parameters() if p.is_meta]
    if still_meta:
        raise hf.HfSpecError(f"weights: tensor {still_meta[0]} is missing")
    return model


def _merged(spec, adapter_dir):
    from peft import PeftModel
    base_dir = spec["lora"]["baseCheckpoint"]
    base = hf._transformers().AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
    return PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--adapter"):
        sys.exit("usage: python export.py SPEC_FILE WEIGHTS_FILE OUT [--adapter ADAPTER_DIR]")
    with open(argv[0]) as f:
        spec = json.load(f)
    out = argv[2]
    try:
        if not hf.is_hf(spec):
            raise hf.HfSpecError("spec.hf: required (a transformers-layout model)")
        if "lora" in spec:
            if len(argv) != 5:
                raise hf.HfSpecError("--adapter: required for a LoRA version (spec.lora)")
            model = _merged(spec, argv[4])
        else:
            model = _full(spec, argv[1])
    except hf.HfSpecError as e:
        print(str(e), file=sys.stderr)
        sys.exit(2)
    model.config.torch_dtype = torch.float32
    model.save_pretrained(out, safe_serialization=True)
    print(json.dumps({"files": sorted(os.listdir(out)), "dtype": "F32"}))


if __name__ == "__main__":
    main(sys.argv[1:])
