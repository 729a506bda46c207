"""What transformers itself computes for checkpoint directories, the reference of the PyTorch engine's tests:
`python hf_reference.py '{"dirs": {name: dir}, "prompts": [[ids]], "newTokens": n}'` prints, per name,
  score:  the log-softmax of each prompt's tokens 1.. given the tokens before them (float32, eager attention);
  greedy: n tokens of greedy decoding after each whole prompt (argmax of the full forward, no cache).
"""
import json
import sys

import torch
import transformers

torch.set_num_threads(1)


def reference(d, prompts, new_tokens):
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    score, greedy = [], []
    with torch.no_grad():
        for p in prompts:
            logp = torch.log_softmax(model(torch.tensor([p])).logits[0].double(), dim=-1)
            score.append([logp[t - 1, p[t]].item() for t in range(1, len(p))])
            seq = list(p)
            for _ in range(new_tokens):
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
            greedy.append(seq[len(p):])
    return {"score": score, "greedy": greedy}


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    print(json.dumps({name: reference(d, args["prompts"], args["newTokens"]) for name, d in args["dirs"].items()}))
