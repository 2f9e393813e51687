// Settings → Hugging Face: the token the app sends to the Hub (gated and
// private models), kept in the system keychain by the app. The page never
// receives the token back: only whether one is saved and a masked form
// ("hf_…abcd"). A keychain that cannot be reached is said in the section,
// where the user is looking, with what to do.
import { api, errorText, type HubTokenView } from './api';
import { clear, h } from './dom';

export class HubTokenSection {
  readonly el: HTMLElement;
  private view: HubTokenView | null = null;
  /** The last Save / Remove failure (bad token, keychain error), until the next try. */
  private failure: string | null = null;
  private busy = false;
  // made once: a refresh (the settings page redraws when the model changes)
  // must not drop a token being pasted
  private input = h('input', {
    id: 'hub-token', type: 'password', autocomplete: 'off', spellcheck: 'false', 'data-testid': 'hub-token-input',
    'aria-describedby': 'hub-token-hint',
  });
  private save = h('button', { 'data-testid': 'hub-token-save' }, 'Save');
  private remove = h('button', { 'data-testid': 'hub-token-remove' }, 'Remove');
  private state = h('div', { class: 'hub-token-state', role: 'status', 'data-testid': 'hub-token-state' });
  private problem = h('div', { role: 'alert' });

  constructor() {
    this.save.addEventListener('click', () => this.submit());
    this.input.addEventListener('keydown', (e) => { if (e.key === 'Enter') this.submit(); });
    this.remove.addEventListener('click', () => void this.run(() => api.removeHubToken()));
    this.el = h('section', { class: 'card settings-section', 'data-testid': 'hub-token-section' },
      h('h2', {}, 'Hugging Face'),
      h('div', { class: 'field field-text' },
        h('label', { for: 'hub-token' }, 'Access token', h('span', { class: 'hint', id: 'hub-token-hint' },
          'For gated and private models: a read token from huggingface.co/settings/tokens. Kept in the system keychain, never in the app’s files.')),
        h('div', { class: 'hub-token-row' }, this.input, this.save, this.remove)),
      this.state, this.problem);
    this.render();
  }

  async refresh(): Promise<void> {
    try {
      this.view = await api.hubTokenStatus();
    } catch (e) {
      this.failure = errorText(e);
    }
    this.render();
  }

  private submit(): void {
    const token = this.input.value;
    if (!token.trim()) {
      this.failure = 'Paste a token first (huggingface.co/settings/tokens).';
      this.render();
      return;
    }
    void this.run(async () => {
      const view = await api.saveHubToken(token);
      this.input.value = ''; // saved: the page keeps no copy
      return view;
    });
  }

  private async run(action: () => Promise<HubTokenView>): Promise<void> {
    this.busy = true;
    this.failure = null;
    this.render();
    try {
      this.view = await action();
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
      this.state.append('Token saved: ', h('code', { 'data-testid': 'hub-token-masked' }, v.masked ?? ''));
    } else if (v?.fallback) {
      this.state.append(`No token saved here; using ${v.fallback}.`);
    } else if (v) {
      this.state.append('No token: public models only.');
    }
    this.input.placeholder = v?.set ? 'Paste a new token to replace it' : 'hf_…';
    this.input.disabled = this.save.disabled = this.remove.disabled = this.busy;
    this.remove.hidden = !v?.set;
    const problem = this.failure ?? (v?.error ? errorText(v.error) : null);
    this.problem.textContent = problem ?? '';
    this.problem.hidden = !problem;
    if (problem) {
      this.problem.className = 'error-note';
      this.problem.setAttribute('data-testid', 'hub-token-error');
    } else {
      this.problem.removeAttribute('data-testid');
    }
  }
}
