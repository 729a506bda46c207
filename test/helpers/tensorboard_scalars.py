"""Every scalar and text of a TensorBoard log folder, read by TensorBoard's own reader
(event_accumulator, keeping every point), as one JSON object on stdout:
{"scalars": {tag: [[step, value, wall_time], ...]}, "texts": {tag: [[step, text], ...]}}."""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator as ea

acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
scalars = {t: [[e.step, e.value, e.wall_time] for e in acc.Scalars(t)] for t in tags["scalars"]}
texts = {}
for t in tags["tensors"]:
    texts[t] = [[e.step, e.tensor_proto.string_val[0].decode("utf-8")] for e in acc.Tensors(t)]
json.dump({"scalars": scalars, "texts": texts}, sys.stdout)
