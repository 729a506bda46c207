"""Log-softmax rows of prompts under a base checkpoint with a PEFT adapter, computed by PEFT itself:
`python peft_logprobs.py '{"base": dir, "adapter": dir, "prompts": [[ids]]}'` prints
{"adapter": [[[V floats] per position] per prompt], "merged": ...}: the adapter loaded with
PeftModel.from_pretrained (unmerged, PEFT's forward), and after merge_and_unload(). float32, eager attention.
"""
import json
import sys

import torch
import transformers
from peft import PeftModel

torch.set_num_threads(1)


def rows(model, prompts):
    with torch.no_grad():
        return [torch.log_softmax(model(torch.tensor([p])).logits[0].double(), dim=-1).tolist() for p in prompts]


if __name__ == "__main__":
    a = json.loads(sys.argv[1])
    base = transformers.AutoModelForCausalLM.from_pretrained(a["base"], dtype=torch.float32, attn_implementation="eager").eval()
    model = PeftModel.from_pretrained(base, a["adapter"]).eval()
    out = {"adapter": rows(model, a["prompts"])}
    out["merged"] = rows(model.merge_and_unload().eval(), a["prompts"])
    print(json.dumps(out))
