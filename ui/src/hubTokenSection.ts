// Settings → Hugging Face: the token the app sends to the Hub (gated and
// private models), kept in the system keychain by the app (see
// keychainSecretField.ts). A keychain that cannot be reached is said in the
// section, with what to do.
import { api, type HubTokenView } from './api';
import { h } from './dom';
import { KeychainSecretField } from './keychainSecretField';

export class HubTokenSection {
  readonly el: HTMLElement;
  private field = new KeychainSecretField<HubTokenView>({
    id: 'hub-token',
    testid: 'hub-token',
    autocomplete: 'off',
    empty: 'Paste a token first (huggingface.co/settings/tokens).',
    status: () => api.hubTokenStatus(),
    save: (token) => api.saveHubToken(token),
    remove: () => api.removeHubToken(),
    describe: (state, v, masked) => {
      if (v.set) state.append('Token saved: ', masked());
      else if (v.fallback) state.append(`No token saved here; using ${v.fallback}.`);
      else state.append('No token: public models only.');
    },
    placeholder: (v) => (v?.set ? 'Paste a new token to replace it' : 'hf_…'),
  });

  constructor() {
    this.el = h('section', { class: 'card settings-section', 'data-testid': 'hub-token-section' },
      h('h2', {}, 'Hugging Face'),
      h('div', { class: 'field field-text' },
        h('label', { for: 'hub-token' }, 'Access token', h('span', { class: 'hint', id: 'hub-token-hint' },
          'For gated and private models: a read token from huggingface.co/settings/tokens. Kept in the system keychain, never in the app’s files.')),
        this.field.row),
      this.field.state, this.field.problem);
  }

  refresh(): Promise<void> {
    return this.field.refresh();
  }
}
