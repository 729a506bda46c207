// troupe export-model <run> --model M --version V --out DIR: a stored version as a Hugging Face-layout
// directory (config.json, model.safetensors, tokenizer files), to serve with transformers / vLLM / SGLang.
// A LoRA version is written merged (W + (α/r)·Aᵀ·Bᵀ over its base's version 0), and with --adapter-out
// also as a PEFT adapter directory. A transformers-layout model (spec.hf) is written by the PyTorch engine's
// Python (transformers' save_pretrained). The export itself: activities/store/model-export.ts.
import { exportModelVersion } from '../../activities/store/model-export';
import { checkpointStoreOf } from '../../infra/checkpoint-store';
import { loadConfig } from '../../infra/config';
import { connect } from '../../infra/db';
import { TroupeError } from '../../infra/errors';
import { ensureDatabase } from '../../stack/postgres';
import { pythonEnvironment } from '../../stack/python-environment';
import { defineCommand } from '../command';

export default defineCommand({
  name: 'export-model',
  summary: 'Write a model version as a Hugging Face-layout directory',
  usage: 'troupe export-model <run> --model M --version V --out DIR [--from HF_DIR] [--adapter-out DIR]',
  positionals: true,
  options: {
    model: { type: 'string', valueName: 'M', description: "the team's model name" },
    version: { type: 'number', valueName: 'V', description: 'the version (0 = initial)', example: '0' },
    out: { type: 'string', valueName: 'DIR', description: 'new or empty directory to write' },
    from: {
      type: 'string',
      valueName: 'HF_DIR',
      description: 'the pretrained directory the model started from: keeps its config fields and copies its tokenizer files',
    },
    'adapter-out': {
      type: 'string',
      valueName: 'DIR',
      description: "a LoRA model's adapter as a PEFT directory (adapter_config.json, adapter_model.safetensors); --out gets the merged model",
    },
  },
  async run({ values, positionals, log }) {
    const runId = positionals[0];
    if (!runId) throw new TroupeError('export-model: name a run', 'list runs with `npx troupe list`');
    if (!values.model) throw new TroupeError('--model: required', 'e.g. --model policy');
    if (values.version === undefined || !Number.isInteger(values.version) || values.version < 0)
      throw new TroupeError('--version: a version number >= 0 is required', 'e.g. --version 0');
    if (!values.out) throw new TroupeError('--out: required', 'e.g. --out ./exported');
    const config = loadConfig();
    const db = await ensureDatabase(config, log);
    const sql = connect(db.url, { max: 1 });
    try {
      const r = await exportModelVersion(sql, checkpointStoreOf(config), {
        runId,
        model: values.model,
        version: values.version,
        out: values.out,
        from: values.from,
        adapterOut: values['adapter-out'],
        // a transformers-layout model (spec.hf) is written by the PyTorch engine's Python: found, or installed once
        python: () => {
          const e = pythonEnvironment({ log });
          if ('missing' in e) throw new TroupeError(`export-model: ${e.missing}`);
          return e.python;
        },
      });
      log(`troupe: wrote ${r.files.join(', ')} (${r.dtype}) to ${values.out}`);
      if (values['adapter-out']) log(`troupe: wrote the PEFT adapter to ${values['adapter-out']} (its base: export-model --version 0 of the base model)`);
      return 0;
    } finally {
      await sql.end({ timeout: 2 });
    }
  },
});
