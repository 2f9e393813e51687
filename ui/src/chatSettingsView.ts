// One chat's own settings, in a dialog from the chat's header: system
// prompt, model, thinking and its budget, sampling, answer length and what
// happens when the chat outgrows the context. A field left empty follows the
// app's Settings (its value shows as the placeholder). Presets: apply one,
// or save these settings (with the chat's answer format) under a name.
import { modelLabel } from './modelNames';
import { api, errorText, type ChatSettings, type Preset, type Settings } from './api';
import type { AnswerFormat } from './answerFormat';
import { h } from './dom';
import { CONTEXT_POLICIES } from './settingsView';

type NumberKey = 'thinking_budget' | 'temperature' | 'top_p' | 'top_k' | 'min_p' | 'repetition_penalty' | 'max_tokens';

const NUMBERS: { key: NumberKey; label: string; step: number }[] = [
  { key: 'temperature', label: 'Temperature', step: 0.05 },
  { key: 'top_p', label: 'Top-p', step: 0.01 },
  { key: 'top_k', label: 'Top-k', step: 1 },
  { key: 'min_p', label: 'Min-p', step: 0.01 },
  { key: 'repetition_penalty', label: 'Repetition penalty', step: 0.01 },
  { key: 'max_tokens', label: 'Max tokens per answer', step: 1 },
  { key: 'thinking_budget', label: 'Thinking budget (tokens, 0 = no limit)', step: 64 },
];

/** What the dialog needs from around it. */
export interface ChatSettingsContext {
  own: ChatSettings;
  global: Settings;
  answerFormat: AnswerFormat | null;
  /** Models the chat may be set to answer with (gallery id and name). */
  models: { id: string; name: string }[];
  presets: Preset[];
  /** The MCP servers of Settings → Tools a chat may turn on. */
  mcpServers?: { name: string; tools: number; ready: boolean; toolNames?: string[] }[];
}

/** Reads the form: only what was filled in is set. */
export function readForm(form: HTMLElement): ChatSettings {
  const out: ChatSettings = {};
  const value = (name: string) => (form.querySelector(`[name="${name}"]`) as HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement | null)?.value ?? '';
  if (value('system_prompt').trim()) out.system_prompt = value('system_prompt');
  if (value('model')) out.model = value('model');
  if (value('thinking')) out.thinking = value('thinking') === 'on';
  for (const { key } of NUMBERS) {
    const v = value(key).trim();
    if (v !== '' && Number.isFinite(Number(v))) out[key] = Number(v);
  }
  if (value('context_policy')) out.context_policy = value('context_policy') as ChatSettings['context_policy'];
  const servers = [...form.querySelectorAll<HTMLInputElement>('input[name="tool_server"]')].filter((i) => i.checked).map((i) => i.value);
  if (servers.length) {
    // tools left out: those unticked now, and those of servers not running now (their list is not shown)
    const shown = [...form.querySelectorAll<HTMLInputElement>('input[name="tool_enabled"]')];
    const listed = new Set(shown.map((i) => i.value));
    const kept = (JSON.parse(value('tools_disabled') || '[]') as string[]).filter((d) => !listed.has(d));
    const disabled = [...kept, ...shown.filter((i) => !i.checked).map((i) => i.value)];
    const requireCall = (form.querySelector('[name="tools_require_call"]') as HTMLInputElement | null)?.checked ?? false;
    out.tools = { servers, disabled: disabled.filter((d) => servers.includes(d.split('/')[0])), require_call: requireCall };
  }
  return out;
}

/** Opens the dialog; resolves with the settings to save, or null when cancelled. */
export function chatSettingsDialog(ctx: ChatSettingsContext, toast: (m: string) => void): Promise<ChatSettings | null> {
  return new Promise((resolve) => {
    const close = (answer: ChatSettings | null) => { overlay.remove(); document.removeEventListener('keydown', onKey); resolve(answer); };
    const onKey = (e: KeyboardEvent) => { if (e.key === 'Escape') close(null); };
    const form = h('div', { class: 'chat-settings-form' });
    const fill = (own: ChatSettings) => {
      form.replaceChildren(...fields(own, ctx));
    };
    fill(ctx.own);

    const presets = [...ctx.presets];
    const presetSelect = h('select', { 'aria-label': 'Preset', 'data-testid': 'preset-select' });
    // the list is drawn again when a preset is saved here (it said "No presets yet" after one was)
    const listPresets = () => presetSelect.replaceChildren(
      h('option', { value: '' }, presets.length ? 'Apply a preset…' : 'No presets yet'),
      ...presets.map((p) => h('option', { value: p.id }, p.name)));
    listPresets();
    presetSelect.addEventListener('change', () => {
      const p = presets.find((x) => String(x.id) === presetSelect.value);
      if (p) fill(p.settings);
    });
    const presetName = h('input', { type: 'text', placeholder: 'Preset name', 'aria-label': 'Preset name', 'data-testid': 'preset-name' });
    const savePreset = h('button', { 'data-testid': 'preset-save', onclick: async () => {
      try {
        const saved = await api.savePreset(presetName.value, readForm(form), ctx.answerFormat);
        toast(`Saved the preset “${saved.name}”.`);
        presetName.value = '';
        // saved again under the same name: it replaces the old one in the list
        const at = presets.findIndex((p) => p.id === saved.id || p.name === saved.name);
        if (at >= 0) presets.splice(at, 1, saved);
        else presets.push(saved);
        listPresets();
      } catch (e) { toast(errorText(e)); }
    } }, 'Save as preset');

    const overlay = h('div', { class: 'modal-overlay', onclick: (e: Event) => { if (e.target === overlay) close(null); } },
      h('div', { class: 'modal chat-settings', role: 'dialog', 'aria-modal': 'true', 'aria-label': 'Chat settings', 'data-testid': 'chat-settings-dialog' },
        h('h2', {}, 'This chat’s settings'),
        h('p', { class: 'hint' }, 'Empty fields follow Settings (shown greyed). They apply from the next answer.'),
        h('div', { class: 'preset-row' }, presetSelect),
        form,
        h('div', { class: 'preset-row' }, presetName, savePreset),
        h('div', { class: 'modal-actions' },
          h('button', { onclick: () => fill({}), title: 'Follow Settings in everything' }, 'Clear all'),
          h('button', { 'data-testid': 'chat-settings-cancel', onclick: () => close(null) }, 'Cancel'),
          h('button', { class: 'primary', 'data-testid': 'chat-settings-save', onclick: () => close(readForm(form)) }, 'Save'))));
    document.body.append(overlay);
    document.addEventListener('keydown', onKey);
    (form.querySelector('textarea') as HTMLTextAreaElement | null)?.focus();
  });
}

function fields(own: ChatSettings, ctx: ChatSettingsContext): HTMLElement[] {
  const g = ctx.global;
  const row = (label: string, input: HTMLElement) => h('label', { class: 'chat-setting' }, h('span', {}, label), input);
  const system = h('textarea', { name: 'system_prompt', rows: 3, placeholder: g.system_prompt || '(none)', 'data-testid': 'chat-setting-system_prompt' });
  system.value = own.system_prompt ?? '';
  const model = h('select', { name: 'model', 'data-testid': 'chat-setting-model' },
    h('option', { value: '' }, 'The loaded model (Settings)'),
    ...ctx.models.map((m) => h('option', { value: m.id, selected: own.model === m.id }, m.name)));
  // a model no longer on disk is still named, never shown by its internal id
  if (own.model && !ctx.models.some((m) => m.id === own.model)) model.append(h('option', { value: own.model, selected: true }, `${modelLabel(own.model, new Map())} (not on disk)`));
  const thinking = h('select', { name: 'thinking', 'data-testid': 'chat-setting-thinking' },
    h('option', { value: '' }, `As Settings (${g.thinking ? 'on' : 'off'})`),
    h('option', { value: 'on', selected: own.thinking === true }, 'On'),
    h('option', { value: 'off', selected: own.thinking === false }, 'Off'));
  const policy = h('select', { name: 'context_policy', 'data-testid': 'chat-setting-context_policy' },
    h('option', { value: '' }, `As Settings (${CONTEXT_POLICIES.find(([p]) => p === g.context_policy)?.[1] ?? g.context_policy})`),
    ...CONTEXT_POLICIES.map(([p, label]) => h('option', { value: p, selected: own.context_policy === p }, label)));
  const numbers = NUMBERS.map(({ key, label, step }) => {
    const input = h('input', { name: key, type: 'number', step, placeholder: String(g[key]), 'data-testid': `chat-setting-${key}` });
    input.value = own[key] == null ? '' : String(own[key]);
    return row(label, input);
  });
  return [row('System prompt', system), row('Model', model), row('Thinking', thinking), ...numbers, row('When the chat outgrows the context', policy), toolsField(own, ctx)];
}

/** Which MCP servers' tools this chat offers (none unless ticked here). */
function toolsField(own: ChatSettings, ctx: ChatSettingsContext): HTMLElement {
  const servers = ctx.mcpServers ?? [];
  const on = new Set(own.tools?.servers ?? []);
  // a server turned on here and since removed from Settings stays listed, so saving keeps the choice visible
  const names = [...servers.map((s) => s.name), ...[...on].filter((n) => !servers.some((s) => s.name === n))];
  const box = h('fieldset', { class: 'chat-setting chat-tools', 'data-testid': 'chat-setting-tools' },
    h('legend', {}, 'Tools (MCP)'),
    h('input', { type: 'hidden', name: 'tools_disabled', value: JSON.stringify(own.tools?.disabled ?? []) }));
  if (names.length === 0) box.append(h('span', { class: 'muted' }, 'No servers: add them in Settings → Tools (MCP).'));
  for (const name of names) {
    const s = servers.find((x) => x.name === name);
    const state = !s ? 'not in Settings' : s.ready ? `${s.tools} tool${s.tools === 1 ? '' : 's'}` : 'not running';
    box.append(h('label', {}, h('input', { type: 'checkbox', name: 'tool_server', value: name, checked: on.has(name), 'data-testid': 'chat-tool-server' }), ` ${name} `, h('span', { class: 'muted' }, `(${state})`)));
    // each tool can be left out (small models read every offered tool's description)
    const tools = s?.toolNames ?? [];
    if (tools.length) {
      const off = new Set(own.tools?.disabled ?? []);
      box.append(h('details', { class: 'chat-tool-list' }, h('summary', {}, `Which of ${name}’s tools`),
        ...tools.map((t) => h('label', {}, h('input', { type: 'checkbox', name: 'tool_enabled', value: `${name}/${t}`, checked: !off.has(`${name}/${t}`), 'data-testid': 'chat-tool' }), ` ${t}`))));
    }
  }
  box.append(h('label', {}, h('input', { type: 'checkbox', name: 'tools_require_call', checked: own.tools?.require_call === true, 'data-testid': 'chat-tools-require' }),
    ' Answer each message with a tool call first'));
  return box;
}
