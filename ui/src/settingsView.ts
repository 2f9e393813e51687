// Settings: generation defaults, engine settings (applied by restarting the
// engine; what the loaded model cannot use is said), the local server.
import { api, errorText, type ServerStatus, type Settings, type SettingsView } from './api';
import { clear, h } from './dom';

type Field = { key: keyof Settings; label: string; hint?: string } & (
  | { kind: 'toggle' }
  | { kind: 'number'; min: number; max: number; step: number }
  | { kind: 'select'; options: [number, string][] }
  | { kind: 'text' }
);

const GENERATION: Field[] = [
  { key: 'thinking', label: 'Thinking', kind: 'toggle', hint: 'Let thinking models reason before answering.' },
  { key: 'system_prompt', label: 'System prompt', kind: 'text' },
  { key: 'temperature', label: 'Temperature', kind: 'number', min: 0, max: 5, step: 0.05, hint: '0 always picks the likeliest token.' },
  { key: 'top_p', label: 'Top-p', kind: 'number', min: 0.01, max: 1, step: 0.01 },
  { key: 'top_k', label: 'Top-k', kind: 'number', min: 0, max: 1000, step: 1, hint: '0 is off.' },
  { key: 'min_p', label: 'Min-p', kind: 'number', min: 0, max: 0.99, step: 0.01 },
  { key: 'repetition_penalty', label: 'Repetition penalty', kind: 'number', min: 0.5, max: 2, step: 0.01, hint: '1 is off.' },
  { key: 'max_tokens', label: 'Max tokens per answer', kind: 'number', min: 1, max: 131072, step: 1 },
];

const ENGINE: Field[] = [
  { key: 'kv_bits', label: 'KV-cache quantization', kind: 'select', options: [[0, 'Off'], [8, '8-bit'], [4, '4-bit']] },
  { key: 'kv_group_size', label: 'KV group size', kind: 'select', options: [[32, '32'], [64, '64'], [128, '128']] },
  { key: 'max_context', label: 'Max context (tokens)', kind: 'number', min: 0, max: 1048576, step: 256, hint: "0 uses the model's own limit." },
  { key: 'max_running', label: 'Max running sequences', kind: 'number', min: 1, max: 64, step: 1 },
  { key: 'vision_cache_mb', label: 'Vision cache (MiB)', kind: 'number', min: 0, max: 65536, step: 64 },
];

export class SettingsPage {
  readonly el: HTMLElement;
  private view: SettingsView | null = null;
  private draft: Settings | null = null;
  private server: ServerStatus | null = null;
  private saved = '';

  constructor(private toast: (m: string) => void) {
    this.el = h('div', { class: 'page settings-page', 'data-testid': 'settings-page' });
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
  }

  setServer(s: ServerStatus): void {
    this.server = s;
    if (this.el.isConnected) this.render();
  }

  private render(): void {
    clear(this.el);
    this.el.append(h('h1', {}, 'Settings'));
    if (!this.view || !this.draft) return;
    const v = this.view;
    this.el.append(this.section('Answers', GENERATION));
    const engine = this.section('Engine', ENGINE);
    if (v.restart_needed) {
      engine.append(h('div', { class: 'notice', 'data-testid': 'restart-needed' },
        'The engine runs with other settings. Restart it to apply these (answers under way stop).',
        h('button', { onclick: () => void this.restart() }, 'Restart engine')));
    }
    for (const note of v.notes) engine.append(h('div', { class: 'note', 'data-testid': 'settings-note' }, note));
    this.el.append(engine);

    const server = this.section('Local OpenAI server', [
      { key: 'server_enabled', label: 'Serve on 127.0.0.1', kind: 'toggle', hint: 'OpenAI-compatible API for other apps on this computer, using the loaded model.' },
      { key: 'server_port', label: 'Port', kind: 'number', min: 1, max: 65535, step: 1 },
    ]);
    const s = this.server;
    server.append(h('div', { class: 'muted', 'data-testid': 'server-url' },
      s?.running ? h('span', {}, 'Running at ', h('code', {}, s.url ?? '')) : s?.error ? h('span', { class: 'warn-text' }, s.error) : 'Not running.'));
    this.el.append(server);
    this.el.append(h('div', { class: 'settings-actions' },
      h('button', { class: 'primary', 'data-testid': 'save-settings', onclick: () => void this.save() }, 'Save'),
      h('span', { class: 'muted', 'data-testid': 'settings-saved' }, this.saved)));
  }

  private section(title: string, fields: Field[]): HTMLElement {
    const box = h('section', { class: 'card settings-section' }, h('h2', {}, title));
    for (const f of fields) box.append(this.field(f));
    return box;
  }

  private field(f: Field): HTMLElement {
    const d = this.draft!;
    const id = `setting-${f.key}`;
    let input: HTMLElement;
    if (f.kind === 'toggle') {
      const box = h('input', { id, type: 'checkbox', class: 'switch', 'data-testid': id, checked: Boolean(d[f.key]) });
      box.addEventListener('change', () => { (d[f.key] as boolean) = box.checked; });
      input = box;
    } else if (f.kind === 'select') {
      const sel = h('select', { id, 'data-testid': id }, ...f.options.map(([value, label]) => h('option', { value, selected: d[f.key] === value }, label)));
      sel.addEventListener('change', () => { (d[f.key] as number) = Number(sel.value); });
      input = sel;
    } else if (f.kind === 'number') {
      const num = h('input', { id, type: 'number', min: f.min, max: f.max, step: f.step, value: String(d[f.key]), 'data-testid': id });
      num.addEventListener('input', () => { (d[f.key] as number) = Number(num.value); });
      input = num;
    } else {
      const area = h('textarea', { id, rows: 3, 'data-testid': id, placeholder: 'You are a helpful assistant.' });
      area.value = String(d[f.key]);
      area.addEventListener('input', () => { (d[f.key] as string) = area.value; });
      input = area;
    }
    return h('div', { class: `field field-${f.kind}` },
      h('label', { for: id }, f.label, f.hint ? h('span', { class: 'hint' }, f.hint) : null),
      input);
  }

  private async save(): Promise<void> {
    if (!this.draft) return;
    try {
      this.view = await api.saveSettings(this.draft);
      this.draft = { ...this.view.settings };
      this.server = await api.serverStatus();
      this.saved = 'Saved.';
    } catch (e) {
      this.saved = '';
      this.toast(errorText(e));
    }
    this.render();
  }

  private async restart(): Promise<void> {
    try {
      this.view = await api.restartEngine();
    } catch (e) {
      this.toast(errorText(e));
    }
    this.render();
  }
}
