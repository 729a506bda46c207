"""A LoRA adapter written by PEFT itself, for the import tests: `python peft_write.py '{"base": dir, "out": dir, "r": 4,
"alpha": 8, "targets": ["q_proj", ...], "fanInFanOut": false, "seed": 1}'` wraps the base checkpoint with
peft.get_peft_model(LoraConfig(...)), draws every lora_B (PEFT starts it at zero) from torch.manual_seed(seed), and
save_pretrained()s the adapter into `out`.
"""
import json
import sys

import torch
import transformers
from peft import LoraConfig, get_peft_model

if __name__ == "__main__":
    a = json.loads(sys.argv[1])
    base = transformers.AutoModelForCausalLM.from_pretrained(a["base"], dtype=torch.float32)
    config = LoraConfig(r=a["r"], lora_alpha=a["alpha"], target_modules=a["targets"], lora_dropout=0.0, bias="none",
                        fan_in_fan_out=a["fanInFanOut"], task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    torch.manual_seed(a["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.3 * torch.randn_like(p))
    model.save_pretrained(a["out"])
    print(json.dumps({"files": sorted(__import__("os").listdir(a["out"]))}))
