// The control room's entry (web/vite.config.ts): drawn into the shell that
// src/http/templates/control.html serves at /__anteroom/admin/.
import { render } from 'preact';
import { App } from './App';
import './control.css';

const root = document.getElementById('app');
if (root) {
  const version = root.dataset.version ?? '';
  root.textContent = '';
  render(<App storage={window.sessionStorage} version={version} />, root);
}
