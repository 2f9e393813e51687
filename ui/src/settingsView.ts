// Settings, applied as they are changed (nothing is lost by leaving the
// page): answer defaults, engine settings (applied by restarting the engine,
// with its progress and result shown; what the loaded model cannot use is
// said), the local server (its error next to its switch), and appearance.
// Every field says in a line what it does.
import { api, errorText, type ContextPolicy, type EngineStatus, type ServerStatus, type Settings, type SettingsView } from './api';
import { ClusterSection } from './clusterSection';
import { clear, h } from './dom';
import { HubTokenSection } from './hubTokenSection';
import { SETTINGS_SPEED_UP_HINT, SPEED_UP_CHOICES } from './loadSettings';
import { McpSection } from './mcpSection';
import { ServerKeySection } from './serverKeySection';
import { applyTheme, themeChoice, type ThemeChoice } from './theme';

type Field = { key: keyof Settings; label: string; hint: string } & (
  | { kind: 'toggle' }
  | { kind: 'number'; min: number; max: number; step: number }
  | { kind: 'select'; options: [number | string, string][] }
  | { kind: 'text' }
);

/** The context policies, as the settings and a chat's own settings offer them. */
export const CONTEXT_POLICIES: [ContextPolicy, string][] = [
  ['stop', 'Stop and say so'],
  ['truncate_middle', 'Leave out the middle (keep the start)'],
  ['rolling_window', 'Leave out the oldest messages'],
];

export const GENERATION: Field[] = [
  { key: 'thinking', label: 'Thinking', kind: 'toggle', hint: 'Models that can think reason step by step before answering; the reasoning shows apart.' },
  { key: 'thinking_budget', label: 'Thinking budget (tokens)', kind: 'number', min: 0, max: 131072, step: 64, hint: 'Thinking is closed after this many tokens and the answer begins. 0 is no limit.' },
  { key: 'context_policy', label: 'When a chat outgrows the context', kind: 'select', options: CONTEXT_POLICIES, hint: 'Stop and say so, or leave out older messages (the reply says how many). A chat can choose its own.' },
  { key: 'system_prompt', label: 'System prompt', kind: 'text', hint: 'Instructions sent at the start of every chat, e.g. “Answer briefly.”' },
  { key: 'temperature', label: 'Temperature', kind: 'number', min: 0, max: 5, step: 0.05, hint: 'How adventurous the wording is. 0 always picks the likeliest word; about 0.7 is usual.' },
  { key: 'top_p', label: 'Top-p', kind: 'number', min: 0.01, max: 1, step: 0.01, hint: 'Picks only among the likeliest words that together make up this share. 1 is off.' },
  { key: 'top_k', label: 'Top-k', kind: 'number', min: 0, max: 1000, step: 1, hint: 'Picks only among this many likeliest words. 0 is off.' },
  { key: 'min_p', label: 'Min-p', kind: 'number', min: 0, max: 0.99, step: 0.01, hint: 'Leaves out words less likely than this share of the likeliest one. 0 is off.' },
  { key: 'repetition_penalty', label: 'Repetition penalty', kind: 'number', min: 0.5, max: 2, step: 0.01, hint: 'Above 1 makes repeating words less likely. 1 is off.' },
  { key: 'max_tokens', label: 'Max tokens per answer', kind: 'number', min: 1, max: 131072, step: 1, hint: 'An answer stops at this length (a token is about ¾ of a word); Continue goes on.' },
];

export const ENGINE: Field[] = [
  { key: 'kv_bits', label: 'KV-cache quantization', kind: 'select', options: [[0, 'Off'], [8, '8-bit'], [4, '4-bit']], hint: 'Stores the conversation memory in fewer bits: long chats take less memory, answers may change slightly.' },
  { key: 'kv_group_size', label: 'KV group size', kind: 'select', options: [[32, '32'], [64, '64'], [128, '128']], hint: 'How many numbers share one scale when quantized. Smaller is more exact and takes a little more memory.' },
  { key: 'max_context', label: 'Max context (tokens)', kind: 'number', min: 0, max: 1048576, step: 256, hint: "The longest conversation the model reads at once. 0 uses the model's own limit." },
  { key: 'max_running', label: 'Max running sequences', kind: 'number', min: 1, max: 64, step: 1, hint: 'How many answers (chats and server clients) are written at the same time; more wait their turn.' },
  { key: 'speed_up', label: 'Speed up replies', kind: 'select', options: SPEED_UP_CHOICES, hint: SETTINGS_SPEED_UP_HINT },
  { key: 'vision_cache_mb', label: 'Vision cache (MiB)', kind: 'number', min: 0, max: 65536, step: 64, hint: 'Memory for pictures already read, so asking again about an image is fast.' },
  { key: 'unload_after_idle_minutes', label: 'Unload after idle (minutes)', kind: 'number', min: 0, max: 10080, step: 5, hint: 'Frees the model’s memory when nothing has been asked for this long; your next message (or a server request) loads it again, and chats stay. 0 never unloads.' },
  { key: 'prefix_disk_cache_mb', label: 'Conversation cache on disk (MiB)', kind: 'number', min: 0, max: 1048576, step: 256, hint: 'Disk space for what the model has already read of your chats, so a chat continued after a restart starts answering at once. Oldest first out; 0 turns it off.' },
];

const SERVER: Field[] = [
  { key: 'server_enabled', label: 'Serve on 127.0.0.1', kind: 'toggle', hint: 'An OpenAI-compatible API for other apps on this computer, answered by the loaded model.' },
  { key: 'server_port', label: 'Port', kind: 'number', min: 1, max: 65535, step: 1, hint: 'The local port other apps connect to (1024 or above; 8080 is usual).' },
];

/** Typing in a number or text field saves this long after the last key. */
const SAVE_DELAY_MS = 500;

export class SettingsPage {
  readonly el: HTMLElement;
  private view: SettingsView | null = null;
  private draft: Settings | null = null;
  private server: ServerStatus | null = null;
  private status: EngineStatus | null = null;
  private saveState = h('span', { class: 'muted', role: 'status', 'data-testid': 'settings-saved' });
  private timer = 0;
  private saving: Promise<void> = Promise.resolve();
  private restart: 'idle' | 'running' | { done: string } | { failed: string } = 'idle';
  private hubToken = new HubTokenSection();
  private serverKey = new ServerKeySection(() => void this.refreshServer());
  private cluster: ClusterSection | null = null;
  /** Settings → Tools (MCP); kept across renders, told of state changes by the app. */
  readonly mcp: McpSection;

  constructor(private toast: (m: string) => void) {
    this.el = h('div', { class: 'page settings-page', 'data-testid': 'settings-page' });
    this.mcp = new McpSection(toast);
  }

  async refresh(): Promise<void> {
    try {
      this.view = await api.getSettings();
      this.draft = { ...this.view.settings };
      this.server = await api.serverStatus();
    } catch (e) {
      this.toast(errorText(e));
    }
    this.render();
    await this.hubToken.refresh();
    await this.serverKey.refresh();
    await this.mcp.refresh();
  }

  private async refreshServer(): Promise<void> {
    try {
      this.setServer(await api.serverStatus());
    } catch (e) {
      this.toast(errorText(e));
    }
  }

  setServer(s: ServerStatus): void {
    this.server = s;
    if (this.el.isConnected) this.renderServerState();
  }

  setStatus(s: EngineStatus): void {
    const before = this.status?.model?.id;
    this.status = s;
    // the notes and what the model can do change with the model
    if (this.el.isConnected && s.model?.id !== before && this.timer === 0) void this.refresh();
  }

  /** Saves a change still waiting for its delay (the page is being left). */
  flush(): void {
    if (this.timer) {
      window.clearTimeout(this.timer);
      this.timer = 0;
      void this.save();
    }
  }

  private render(): void {
    clear(this.el);
    this.el.append(h('div', { class: 'settings-head' }, h('h1', {}, 'Settings'), this.saveState));
    if (!this.view || !this.draft) return;
    const v = this.view;
    // how the app looks comes first: it was the last thing on a long page
    this.el.append(this.appearance());
    this.el.append(this.section('Answers', GENERATION));
    const engine = this.section('Engine', ENGINE);
    engine.append(this.restartBlock(v.restart_needed));
    if (v.model_has_own_load_settings) {
      engine.append(h('div', { class: 'note', 'data-testid': 'own-load-settings-note' },
        `${v.model_has_own_load_settings} loads with its own context, KV-cache quantization and running sequences (Models → Load settings); these here are for models without their own.`));
    }
    for (const note of v.notes) engine.append(h('div', { class: 'note', 'data-testid': 'settings-note' }, note));
    this.el.append(engine);
    const server = this.section('Local OpenAI server', SERVER);
    server.append(this.serverKey.el);
    server.append(h('div', { class: 'server-state', 'data-testid': 'server-url', role: 'status' }));
    this.el.append(server);
    this.cluster = new ClusterSection(() => this.draft!, (soon) => { if (soon) this.saveSoon(); else void this.save(); });
    this.el.append(this.cluster.el);
    void this.cluster.refresh();
    this.el.append(this.mcp.el);
    this.el.append(this.hubToken.el);
    this.renderServerState();
  }

  private renderServerState(): void {
    const box = this.el.querySelector<HTMLElement>('[data-testid=server-url]');
    if (!box) return;
    clear(box);
    const s = this.server;
    if (s?.running) box.append('Running at ', h('code', {}, s.url ?? ''));
    else if (s?.error) box.append(h('span', { class: 'error-note', 'data-testid': 'server-error' }, s.error));
    else box.append(h('span', { class: 'muted' }, 'Not running.'));
    // the error belongs next to the switch that asked for the server
    const toggle = this.el.querySelector<HTMLInputElement>('[data-testid=setting-server_enabled]');
    if (toggle) toggle.setAttribute('aria-invalid', s?.error ? 'true' : 'false');
  }

  private restartBlock(needed: boolean): HTMLElement {
    const r = this.restart;
    const box = h('div', { 'data-testid': 'restart-block' });
    if (r === 'running') {
      box.append(h('div', { class: 'notice', role: 'status', 'data-testid': 'restart-progress' },
        h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'Restarting the engine with these settings…'));
    } else if (needed) {
      box.append(h('div', { class: 'notice', 'data-testid': 'restart-needed' },
        'The engine runs with other settings. Restart it to apply these (answers under way stop).',
        h('button', { 'data-testid': 'restart-engine', onclick: () => void this.restartEngine() }, 'Restart engine')));
    }
    if (typeof r === 'object') {
      box.append('done' in r ? h('div', { class: 'ok-note', role: 'status', 'data-testid': 'restart-result' }, r.done)
        : h('div', { class: 'error-note', role: 'alert', 'data-testid': 'restart-result' }, r.failed));
    }
    return box;
  }

  private appearance(): HTMLElement {
    const choice = themeChoice();
    const sel = h('select', { id: 'setting-theme', 'data-testid': 'setting-theme' },
      ...(['system', 'light', 'dark'] as ThemeChoice[]).map((t) => h('option', { value: t, selected: t === choice }, t === 'system' ? 'Like the system' : t === 'light' ? 'Light' : 'Dark')));
    sel.addEventListener('change', () => applyTheme(sel.value as ThemeChoice));
    return h('section', { class: 'card settings-section' }, h('h2', {}, 'Appearance'),
      h('div', { class: 'field field-select' },
        h('label', { for: 'setting-theme' }, 'Colours', h('span', { class: 'hint' }, 'Light or dark, or follow the system.')),
        sel));
  }

  private section(title: string, fields: Field[]): HTMLElement {
    const box = h('section', { class: 'card settings-section' }, h('h2', {}, title));
    for (const f of fields) box.append(this.field(f));
    return box;
  }

  /** Why a field does nothing for the loaded model, if it does nothing. */
  private unavailable(f: Field): string | null {
    const m = this.status?.model;
    if (f.key === 'thinking' && m && !m.thinking) return `${m.name} does not think before answering; this applies to models that do.`;
    return null;
  }

  private field(f: Field): HTMLElement {
    const d = this.draft!;
    const id = `setting-${f.key}`;
    const hintId = `${id}-hint`;
    const off = this.unavailable(f);
    let input: HTMLElement;
    if (f.kind === 'toggle') {
      const box = h('input', { id, type: 'checkbox', class: 'switch', 'data-testid': id, checked: Boolean(d[f.key]) && !off, disabled: !!off, 'aria-describedby': hintId });
      box.addEventListener('change', () => { (d[f.key] as boolean) = box.checked; void this.save(); });
      input = box;
    } else if (f.kind === 'select') {
      const sel = h('select', { id, 'data-testid': id, 'aria-describedby': hintId }, ...f.options.map(([value, label]) => h('option', { value, selected: d[f.key] === value }, label)));
      const numeric = typeof f.options[0]?.[0] === 'number';
      sel.addEventListener('change', () => { (d as unknown as Record<string, unknown>)[f.key] = numeric ? Number(sel.value) : sel.value; void this.save(); });
      input = sel;
    } else if (f.kind === 'number') {
      const num = h('input', { id, type: 'number', min: f.min, max: f.max, step: f.step, value: String(d[f.key]), 'data-testid': id, 'aria-describedby': `${hintId} ${id}-error` });
      const problem = h('div', { class: 'field-error', id: `${id}-error`, 'data-testid': `${id}-error`, role: 'alert', hidden: true });
      num.addEventListener('input', () => {
        if (num.value === '') return; // half-typed: wait for a number
        // a value the app would refuse is marked on the field itself, and not saved
        const wrong = numberProblem(f, num.value);
        num.setAttribute('aria-invalid', wrong ? 'true' : 'false');
        problem.textContent = wrong ?? '';
        problem.hidden = !wrong;
        if (wrong) {
          window.clearTimeout(this.timer);
          this.timer = 0;
          this.saveState.textContent = `Not saved: ${f.label} — ${wrong}`;
          return;
        }
        (d[f.key] as number) = Number(num.value);
        this.saveSoon();
      });
      num.addEventListener('change', () => this.flush());
      input = h('div', { class: 'field-input' }, num, problem);
    } else {
      const area = h('textarea', { id, rows: 3, 'data-testid': id, placeholder: 'You are a helpful assistant.', 'aria-describedby': hintId });
      area.value = String(d[f.key]);
      area.addEventListener('input', () => { (d[f.key] as string) = area.value; this.saveSoon(); });
      area.addEventListener('change', () => this.flush());
      input = area;
    }
    return h('div', { class: `field field-${f.kind}${off ? ' unavailable' : ''}` },
      h('label', { for: id }, f.label, h('span', { class: 'hint', id: hintId, 'data-testid': `${id}-hint` }, off ?? f.hint)),
      input);
  }

  private saveSoon(): void {
    this.saveState.textContent = 'Saving…';
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => { this.timer = 0; void this.save(); }, SAVE_DELAY_MS);
  }

  private save(): Promise<void> {
    this.saveState.textContent = 'Saving…';
    // one save at a time, in the order the changes were made
    this.saving = this.saving.then(() => this.saveNow());
    return this.saving;
  }

  private async saveNow(): Promise<void> {
    if (!this.draft) return;
    this.saveState.textContent = 'Saving…';
    try {
      const restartWasNeeded = this.view?.restart_needed;
      this.view = await api.saveSettings(this.draft);
      this.server = await api.serverStatus();
      this.saveState.textContent = this.timer ? 'Saving…' : 'Saved.';
      // redraw what depends on the saved values, not the fields being typed in
      if (this.view.restart_needed !== restartWasNeeded) this.redrawRestart();
      this.redrawNotes();
      this.renderServerState();
      void this.cluster?.refresh();
    } catch (e) {
      this.saveState.textContent = `Not saved: ${errorText(e)}`;
    }
  }

  private redrawRestart(): void {
    this.el.querySelector('[data-testid=restart-block]')?.replaceWith(this.restartBlock(!!this.view?.restart_needed));
  }

  private redrawNotes(): void {
    const notes = [...this.el.querySelectorAll('[data-testid=settings-note]')];
    const anchor = this.el.querySelector('[data-testid=restart-block]');
    for (const n of notes) n.remove();
    for (const note of [...(this.view?.notes ?? [])].reverse()) anchor?.after(h('div', { class: 'note', 'data-testid': 'settings-note' }, note));
  }

  private async restartEngine(): Promise<void> {
    this.flush();
    await this.saving;
    this.restart = 'running';
    this.redrawRestart();
    try {
      this.view = await api.restartEngine();
      const k = this.view.settings;
      const kv = k.kv_bits ? `${k.kv_bits}-bit KV cache` : 'KV cache not quantized';
      this.restart = { done: `Engine restarted: ${kv}, up to ${k.max_running} answers at once.` };
    } catch (e) {
      this.restart = { failed: `The restart failed: ${errorText(e)}` };
    }
    this.redrawRestart();
    this.redrawNotes();
  }
}

/** What is wrong with `raw` for number field `f`, in words for beside the field; null when it is fine. */
export function numberProblem(f: { min: number; max: number; step: number }, raw: string): string | null {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) return 'Enter a number.';
  if (n < f.min || n > f.max) return `Must be between ${f.min} and ${f.max}.`;
  if (Number.isInteger(f.step) && !Number.isInteger(n)) return 'Must be a whole number.';
  return null;
}
