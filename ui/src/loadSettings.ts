// A model's load settings in words and from a form: context length, KV-cache
// quantization, running sequences and speeding up replies, remembered per model (the Models
// page's "Load settings"); a model without its own follows Settings.
import type { ModelLoadSettings } from './api';
import type { SpeedUp } from './bindings/SpeedUp';
import type { SpeedUpChoices } from './bindings/SpeedUpChoices';
import type { Drafter } from './bindings/Drafter';

/** "Speed up replies" (speculative decoding), as Settings and a model's load settings offer it. */
export const SPEED_UP_CHOICES: [Extract<SpeedUp, string>, string][] = [
  ['off', 'Off'],
  ['prompt_lookup', 'Prompt lookup'],
];
export const SPEED_UP_HINT = 'Guesses the next words from the chat’s own text (a rewrite, extracted fields, edited code) and lets the model check several at once. Answers stay the same; only the speed changes.';
/** Settings' hint: the choices made for one model live in its own Load settings. */
export const SETTINGS_SPEED_UP_HINT = `${SPEED_UP_HINT} A model’s own Load settings (Models) also offer its MTP heads, draft models and drafters made for it.`;

/** What a drafter folder is, as the choices and the gallery name it. */
export const DRAFTER_WORDS: Record<Drafter, string> = {
  assistant: 'Assistant drafter',
  mtp_head: 'MTP head',
};

/** A model's "Speed up replies" choices: off and prompt lookup always,
 * its own MTP heads when its checkpoint ships them, each model on disk
 * that can draft for it (value `draft:<gallery id>`) and each drafter
 * folder made for it (value `drafter:<gallery id>`). */
export function speedUpOptions(choices: SpeedUpChoices | null | undefined): [string, string][] {
  const options: [string, string][] = [...SPEED_UP_CHOICES];
  if (choices?.mtp) options.push(['mtp', 'Its own MTP heads']);
  for (const d of choices?.draft_models ?? []) options.push([`draft:${d.id}`, `Draft model: ${d.name}`]);
  for (const d of choices?.drafters ?? []) options.push([`drafter:${d.id}`, `${DRAFTER_WORDS[d.drafter ?? 'assistant']}: ${d.name}`]);
  return options;
}

/** The select's value for a setting. */
export function speedUpValue(s: SpeedUp | null | undefined): string {
  if (s == null) return 'off';
  if (typeof s === 'object') return 'draft_model' in s ? `draft:${s.draft_model}` : `drafter:${s.drafter}`;
  return s;
}

/** The setting a select value stands for; `null` for none. */
export function readSpeedUp(value: string): SpeedUp | null {
  if (value === 'off' || value === 'prompt_lookup' || value === 'mtp') return value;
  if (value.startsWith('draft:') && value.length > 'draft:'.length) return { draft_model: value.slice('draft:'.length) };
  if (value.startsWith('drafter:') && value.length > 'drafter:'.length) return { drafter: value.slice('drafter:'.length) };
  return null;
}

const SAME = 'Answers stay the same; only the speed changes.';

/** What the chosen way of speeding up does, under the select; `choices`
 * tells which kind of drafter a `drafter:` value is. */
export function speedUpHint(value: string, choices?: SpeedUpChoices | null): string {
  if (value === 'mtp') return `The model’s own multi-token-prediction heads guess the next few tokens; the model checks them in one pass. ${SAME}`;
  if (value.startsWith('draft:')) return `A smaller model with the same vocabulary guesses the next few tokens; this model checks them in one pass. Both are loaded. ${SAME}`;
  if (value.startsWith('drafter:')) {
    const id = value.slice('drafter:'.length);
    const kind = choices?.drafters?.find((d) => d.id === id)?.drafter;
    if (kind === 'assistant') return `A small assistant drafter made for this model (Gemma 4) reads the model’s own keys and values and guesses the next few tokens; the model checks them in one pass. ${SAME}`;
    if (kind === 'mtp_head') return `A multi-token-prediction head split from this model’s checkpoint (Qwen3.5) guesses the next few tokens from the model’s own state; the model checks them in one pass. ${SAME}`;
    return `A drafter folder made for this model guesses the next few tokens from the model’s own state; the model checks them in one pass. ${SAME}`;
  }
  return SPEED_UP_HINT;
}

/** Why models and drafters on disk are missing from the choices, or `null` when none is. */
export function draftModelsNote(choices: SpeedUpChoices | null | undefined): string | null {
  const left = choices?.not_listed ?? [];
  if (left.length === 0) return null;
  const list = (ds: typeof left) => ds.map((d) => `${d.name}: ${d.reason ?? 'cannot draft'}`).join('; ');
  const models = left.filter((d) => d.drafter == null);
  const drafters = left.filter((d) => d.drafter != null);
  const parts: string[] = [];
  if (models.length > 0) parts.push(`A draft model must use this model’s tokenizer (the same vocabulary, token for token), so only such models on disk are offered. Not offered: ${list(models)}.`);
  if (drafters.length > 0) parts.push(`A drafter (a Gemma 4 assistant, an MTP head split from a Qwen3.5) is made for one model and drafts only for it. Not offered: ${list(drafters)}.`);
  return parts.join(' ');
}

/** The note's summary: "Why 2 models and one drafter on disk cannot draft for it". */
export function draftModelsNoteTitle(choices: SpeedUpChoices): string {
  const count = (n: number, one: string) => (n === 1 ? `one ${one}` : `${n} ${one}s`);
  const drafters = choices.not_listed.filter((d) => d.drafter != null).length;
  const models = choices.not_listed.length - drafters;
  const what = [models ? count(models, 'model') : '', drafters ? count(drafters, 'drafter') : ''].filter(Boolean).join(' and ');
  return `Why ${what} on disk cannot draft for it`;
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
  if (speedUp === null) return { error: 'Speed up replies is off, prompt lookup, the model’s MTP heads, a draft model or a drafter.' };
  return { settings: { max_context: context, kv_bits: kvBits, max_running: maxRunning, speed_up: speedUp } };
}

/** "prompt lookup", "MTP heads", "draft model hf:…", "drafter …"; empty when off. */
function speedUpWords(s: SpeedUp | null | undefined): string {
  if (s == null || s === 'off') return '';
  if (s === 'prompt_lookup') return 'prompt lookup';
  if (s === 'mtp') return 'MTP heads';
  const bare = (id: string) => id.replace(/^(hf|dir|file):/, '');
  return 'draft_model' in s ? `draft model ${bare(s.draft_model)}` : `drafter ${bare(s.drafter)}`;
}

/** "context 4,096 · KV 8-bit · 2 at once", for a model's row. */
export function loadSettingsWords(s: ModelLoadSettings): string {
  const context = s.max_context ? `context ${s.max_context.toLocaleString('en-US')}` : 'the model’s own context';
  const kv = s.kv_bits ? `KV ${s.kv_bits}-bit` : 'KV not quantized';
  const speed = speedUpWords(s.speed_up);
  return `${context} · ${kv} · ${s.max_running} at once${speed ? ` · ${speed}` : ''}`;
}
