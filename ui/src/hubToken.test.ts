// Settings → Hugging Face against the app's commands (mocked IPC): what the
// section shows of a saved token, what Save and Remove send, and keychain
// failures said where the user looks; a gated download's message.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import type { HubTokenView } from './api';
import { downloadErrorText } from './downloadErrors';
import { HubTokenSection } from './hubTokenSection';

afterEach(() => { clearMocks(); document.body.innerHTML = ''; });

const none: HubTokenView = { set: false, masked: null, fallback: null, error: null };

describe('the Hub token in Settings', () => {
  it('saves a pasted token and shows it masked only, then removes it', async () => {
    const calls: [string, unknown][] = [];
    let view = none;
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      if (cmd === 'hub_token_status') return view;
      if (cmd === 'save_hub_token') { view = { set: true, masked: 'hf_…WXYZ', fallback: null, error: null }; return view; }
      if (cmd === 'remove_hub_token') { view = { ...none, fallback: 'HF_TOKEN from the environment' }; return view; }
    });
    const section = new HubTokenSection();
    document.body.append(section.el);
    await section.refresh();
    expect(section.el.querySelector('[data-testid=hub-token-state]')!.textContent).toMatch(/public models only/);
    expect(section.el.querySelector<HTMLButtonElement>('[data-testid=hub-token-remove]')!.hidden).toBe(true);

    const input = section.el.querySelector<HTMLInputElement>('[data-testid=hub-token-input]')!;
    expect(input.type).toBe('password');
    input.value = 'hf_secretsecretsecretWXYZ';
    // the page redraws (the model changed) while the token is being pasted: it stays
    await section.refresh();
    expect(section.el.querySelector<HTMLInputElement>('[data-testid=hub-token-input]')!.value).toBe('hf_secretsecretsecretWXYZ');
    section.el.querySelector<HTMLButtonElement>('[data-testid=hub-token-save]')!.click();
    await vi.waitFor(() => expect(section.el.querySelector('[data-testid=hub-token-masked]')?.textContent).toBe('hf_…WXYZ'));
    expect(calls.find(([c]) => c === 'save_hub_token')?.[1]).toEqual({ token: 'hf_secretsecretsecretWXYZ' });
    expect(input.value, 'the field keeps no copy once saved').toBe('');
    expect(section.el.innerHTML).not.toContain('secretsecret');
    expect(section.el.querySelector<HTMLButtonElement>('[data-testid=hub-token-remove]')!.hidden).toBe(false);

    section.el.querySelector<HTMLButtonElement>('[data-testid=hub-token-remove]')!.click();
    await vi.waitFor(() => expect(section.el.querySelector('[data-testid=hub-token-masked]')).toBeNull());
    expect(section.el.querySelector('[data-testid=hub-token-state]')!.textContent).toMatch(/using HF_TOKEN from the environment/);
  });

  it('says a keychain failure and a refused token in the section, and keeps going', async () => {
    const keychain = { code: 'KEYCHAIN_UNAVAILABLE', message: 'the system keychain is not available: no Secret Service' };
    mockIPC((cmd) => {
      if (cmd === 'hub_token_status') return { ...none, error: keychain };
      if (cmd === 'save_hub_token') throw { code: 'INVALID_TOKEN', message: 'not a Hugging Face token: the token contains \' \'' };
    });
    const section = new HubTokenSection();
    document.body.append(section.el);
    await section.refresh();
    expect(section.el.querySelector('[data-testid=hub-token-error]')!.textContent).toMatch(/keychain is not available/);

    // an empty field is refused before the keychain is asked
    section.el.querySelector<HTMLButtonElement>('[data-testid=hub-token-save]')!.click();
    expect(section.el.querySelector('[data-testid=hub-token-error]')!.textContent).toMatch(/Paste a token first/);

    section.el.querySelector<HTMLInputElement>('[data-testid=hub-token-input]')!.value = 'hf_with space';
    section.el.querySelector<HTMLButtonElement>('[data-testid=hub-token-save]')!.click();
    await vi.waitFor(() => expect(section.el.querySelector('[data-testid=hub-token-error]')!.textContent).toMatch(/not a Hugging Face token/));
  });
});

describe('a gated model without access', () => {
  it('tells to accept the terms on its page and to set a token', () => {
    const text = downloadErrorText({
      code: 'GATED',
      message: "meta/Llama-Gated is gated: add a Hugging Face token in Settings, and accept the model's terms at https://huggingface.co/meta/Llama-Gated",
    });
    expect(text).toMatch(/accept its terms/);
    expect(text).toMatch(/Settings → Hugging Face/);
    expect(text).toContain('https://huggingface.co/meta/Llama-Gated');
    expect(downloadErrorText({ code: 'AUTH_REQUIRED', message: 'raw' })).toMatch(/token.*Settings/);
  });
});
