// Settings → Local OpenAI server → API key: optional; with one saved, the
// server answers only clients that send `Authorization: Bearer <key>`. The
// app keeps the key in the system keychain; the page never receives it
// back, only whether one is saved and its last four characters. Part of the
// server's section, made once so a redraw keeps a key being typed.
import { api, errorText, type ServerKeyView } from './api';
import { clear, h } from './dom';

export class ServerKeySection {
  readonly el: HTMLElement;
  private view: ServerKeyView | null = null;
  /** The last Save / Remove failure, until the next try. */
  private failure: string | null = null;
  private busy = false;
  private input = h('input', {
    id: 'server-api-key', type: 'password', autocomplete: 'new-password', spellcheck: 'false',
    'data-testid': 'server-key-input', 'aria-describedby': 'server-api-key-hint',
  });
  private save = h('button', { 'data-testid': 'server-key-save' }, 'Save');
  private remove = h('button', { 'data-testid': 'server-key-remove' }, 'Remove');
  private state = h('div', { class: 'hub-token-state', role: 'status', 'data-testid': 'server-key-state' });
  private problem = h('div', { role: 'alert' });

  /** `changed` is told after a save or a removal (the server restarted with it). */
  constructor(private changed: () => void = () => {}) {
    this.save.addEventListener('click', () => this.submit());
    this.input.addEventListener('keydown', (e) => { if (e.key === 'Enter') this.submit(); });
    this.remove.addEventListener('click', () => void this.run(() => api.removeServerApiKey()));
    this.el = h('div', { class: 'field field-text', 'data-testid': 'server-key-section' },
      h('label', { for: 'server-api-key' }, 'API key', h('span', { class: 'hint', id: 'server-api-key-hint' },
        'Optional: clients must then send it as “Authorization: Bearer …”. Kept in the system keychain, never in the app’s files.')),
      h('div', { class: 'hub-token-row' }, this.input, this.save, this.remove),
      this.state, this.problem);
    this.render();
  }

  async refresh(): Promise<void> {
    try {
      this.view = await api.serverApiKeyStatus();
    } catch (e) {
      this.failure = errorText(e);
    }
    this.render();
  }

  private submit(): void {
    const key = this.input.value;
    if (!key.trim()) {
      this.failure = 'Type a key first.';
      this.render();
      return;
    }
    void this.run(async () => {
      const view = await api.saveServerApiKey(key);
      this.input.value = ''; // saved: the page keeps no copy
      return view;
    });
  }

  private async run(action: () => Promise<ServerKeyView>): Promise<void> {
    this.busy = true;
    this.failure = null;
    this.render();
    try {
      this.view = await action();
      this.changed();
    } catch (e) {
      this.failure = errorText(e);
    }
    this.busy = false;
    this.render();
  }

  private render(): void {
    const v = this.view;
    clear(this.state);
    if (v?.set) {
      this.state.append('Clients need the key ', h('code', { 'data-testid': 'server-key-masked' }, v.masked ?? '…'));
    } else if (v) {
      this.state.append('No key: any program on this computer may use the server.');
    }
    this.input.placeholder = v?.set ? 'Type a new key to replace it' : 'No key';
    this.input.disabled = this.save.disabled = this.remove.disabled = this.busy;
    this.remove.hidden = !v?.set;
    const problem = this.failure ?? (v?.error ? errorText(v.error) : null);
    this.problem.textContent = problem ?? '';
    this.problem.hidden = !problem;
    if (problem) {
      this.problem.className = 'error-note';
      this.problem.setAttribute('data-testid', 'server-key-error');
    } else {
      this.problem.removeAttribute('data-testid');
    }
  }
}
