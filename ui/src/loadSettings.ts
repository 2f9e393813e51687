// A model's load settings in words and from a form: context length, KV-cache
// quantization, running sequences and speeding up replies, remembered per model (the Models
// page's "Load settings"); a model without its own follows Settings.
import type { ModelLoadSettings } from './api';
import type { SpeedUp } from './bindings/SpeedUp';

/** "Speed up replies" (speculative decoding), as Settings and a model's load settings offer it. */
export const SPEED_UP_CHOICES: [SpeedUp, string][] = [
  ['off', 'Off'],
  ['prompt_lookup', 'Prompt lookup'],
];
export const SPEED_UP_HINT = 'Guesses the next words from the chat’s own text (a rewrite, extracted fields, edited code) and lets the model check several at once. Answers stay the same; only the speed changes.';

/** The form's fields as typed. */
export interface LoadForm {
  context: string;
  kvBits: string;
  maxRunning: string;
  /** Absent: off. */
  speedUp?: string;
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
  const speedUp = (f.speedUp ?? 'off') as SpeedUp;
  if (!['off', 'prompt_lookup'].includes(speedUp)) return { error: 'Speed up replies is off or prompt lookup.' };
  return { settings: { max_context: context, kv_bits: kvBits, max_running: maxRunning, speed_up: speedUp } };
}

/** "context 4,096 · KV 8-bit · 2 at once", for a model's row. */
export function loadSettingsWords(s: ModelLoadSettings): string {
  const context = s.max_context ? `context ${s.max_context.toLocaleString('en-US')}` : 'the model’s own context';
  const kv = s.kv_bits ? `KV ${s.kv_bits}-bit` : 'KV not quantized';
  const speed = s.speed_up === 'prompt_lookup' ? ' · prompt lookup' : '';
  return `${context} · ${kv} · ${s.max_running} at once${speed}`;
}
