// A model's load settings in words and from a form: context length, KV-cache
// quantization and running sequences, remembered per model (the Models
// page's "Load settings"); a model without its own follows Settings.
import type { ModelLoadSettings } from './api';

/** The form's fields as typed. */
export interface LoadForm {
  context: string;
  kvBits: string;
  maxRunning: string;
}

/** Reads the form, or says what is wrong with it (the backend checks again). */
export function readLoadForm(f: LoadForm): { settings: ModelLoadSettings } | { error: string } {
  const context = Number(f.context.trim() === '' ? '0' : f.context);
  if (!Number.isInteger(context) || context < 0 || context > 1_048_576) {
    return { error: 'The context is a whole number of tokens from 0 (the model’s own) to 1,048,576.' };
  }
  const kvBits = Number(f.kvBits);
  if (![0, 4, 8].includes(kvBits)) return { error: 'KV-cache quantization is off, 8-bit or 4-bit.' };
  const maxRunning = Number(f.maxRunning);
  if (!Number.isInteger(maxRunning) || maxRunning < 1 || maxRunning > 64) {
    return { error: 'Running sequences are a whole number from 1 to 64.' };
  }
  return { settings: { max_context: context, kv_bits: kvBits, max_running: maxRunning } };
}

/** "context 4,096 · KV 8-bit · 2 at once", for a model's row. */
export function loadSettingsWords(s: ModelLoadSettings): string {
  const context = s.max_context ? `context ${s.max_context.toLocaleString('en-US')}` : 'the model’s own context';
  const kv = s.kv_bits ? `KV ${s.kv_bits}-bit` : 'KV not quantized';
  return `${context} · ${kv} · ${s.max_running} at once`;
}
