// A model's load settings in words and from a form: context length, KV-cache
// quantization, running sequences and speeding up replies, remembered per model (the Models
// page's "Load settings"); a model without its own follows Settings.
import type { ModelLoadSettings } from './api';
import type { SpeedUp } from './bindings/SpeedUp';
import type { SpeedUpChoices } from './bindings/SpeedUpChoices';

/** "Speed up replies" (speculative decoding), as Settings and a model's load settings offer it. */
export const SPEED_UP_CHOICES: [Extract<SpeedUp, string>, string][] = [
  ['off', 'Off'],
  ['prompt_lookup', 'Prompt lookup'],
];
export const SPEED_UP_HINT = 'Guesses the next words from the chat’s own text (a rewrite, extracted fields, edited code) and lets the model check several at once. Answers stay the same; only the speed changes.';

/** A model's "Speed up replies" choices: off and prompt lookup always,
 * its own MTP heads when its checkpoint ships them, and each model on disk
 * that can draft for it (value `draft:<gallery id>`). */
export function speedUpOptions(choices: SpeedUpChoices | null | undefined): [string, string][] {
  const options: [string, string][] = [...SPEED_UP_CHOICES];
  if (choices?.mtp) options.push(['mtp', 'Its own MTP heads']);
  for (const d of choices?.draft_models ?? []) options.push([`draft:${d.id}`, `Draft model: ${d.name}`]);
  return options;
}

/** The select's value for a setting. */
export function speedUpValue(s: SpeedUp | null | undefined): string {
  if (s == null) return 'off';
  if (typeof s === 'object') return `draft:${s.draft_model}`;
  return s;
}

/** The setting a select value stands for; `null` for none. */
export function readSpeedUp(value: string): SpeedUp | null {
  if (value === 'off' || value === 'prompt_lookup' || value === 'mtp') return value;
  if (value.startsWith('draft:') && value.length > 'draft:'.length) return { draft_model: value.slice('draft:'.length) };
  return null;
}

/** What the chosen way of speeding up does, under the select. */
export function speedUpHint(value: string): string {
  if (value === 'mtp') return 'The model’s own multi-token-prediction heads guess the next few tokens; the model checks them in one pass. Answers stay the same; only the speed changes.';
  if (value.startsWith('draft:')) return 'A smaller model with the same vocabulary guesses the next few tokens; this model checks them in one pass. Both are loaded. Answers stay the same; only the speed changes.';
  return SPEED_UP_HINT;
}

/** Why models on disk are missing from the draft choices, or `null` when none is. */
export function draftModelsNote(choices: SpeedUpChoices | null | undefined): string | null {
  const left = choices?.not_listed ?? [];
  if (left.length === 0) return null;
  const why = left.map((d) => `${d.name}: ${d.reason ?? 'cannot draft'}`).join('; ');
  return `A draft model must use this model’s tokenizer (the same vocabulary, token for token) and keep a cache that can be cut back, so only such models on disk are offered. Not offered: ${why}.`;
}

/** The form's fields as typed. */
export interface LoadForm {
  context: string;
  kvBits: string;
  maxRunning: string;
  /** A `speedUpOptions` value; absent: off. */
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
  const speedUp = readSpeedUp(f.speedUp ?? 'off');
  if (speedUp === null) return { error: 'Speed up replies is off, prompt lookup, the model’s MTP heads or a draft model.' };
  return { settings: { max_context: context, kv_bits: kvBits, max_running: maxRunning, speed_up: speedUp } };
}

/** "prompt lookup", "MTP heads", "draft model hf:…"; empty when off. */
function speedUpWords(s: SpeedUp | null | undefined): string {
  if (s == null || s === 'off') return '';
  if (s === 'prompt_lookup') return 'prompt lookup';
  if (s === 'mtp') return 'MTP heads';
  return `draft model ${s.draft_model.replace(/^(hf|dir|file):/, '')}`;
}

/** "context 4,096 · KV 8-bit · 2 at once", for a model's row. */
export function loadSettingsWords(s: ModelLoadSettings): string {
  const context = s.max_context ? `context ${s.max_context.toLocaleString('en-US')}` : 'the model’s own context';
  const kv = s.kv_bits ? `KV ${s.kv_bits}-bit` : 'KV not quantized';
  const speed = speedUpWords(s.speed_up);
  return `${context} · ${kv} · ${s.max_running} at once${speed ? ` · ${speed}` : ''}`;
}
