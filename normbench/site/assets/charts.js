/* Upgrades every figure.nb-chart from its static SVG to an interactive vega-embed view (tooltips, click a mark to
   open its record). CSP-safe: expressions run in Vega's interpreter (no eval), no <style> is injected (the
   stylesheets are vendored files), the spec is read as JSON text. If anything fails the static SVG stays. */
(function () {
  'use strict';

  function options() {
    return {
      renderer: 'svg',
      actions: false,
      ast: true,                                 // parse expressions to ASTs ...
      expr: window.vega.expressionInterpreter,   // ... and evaluate them without the Function constructor
      defaultStyle: false,                       // vega-embed.css is a vendored file
      tooltip: {disableDefaultStyle: true},      // vega-tooltip.css is a vendored file
      logLevel: window.vega.Warn
    };
  }

  function upgrade(fig) {
    var node = fig.querySelector('script.nb-spec');
    var still = fig.querySelector('.nb-static');
    if (!node || !still) return;
    var spec;
    try {
      spec = JSON.parse(node.textContent);
    } catch (e) {
      console.error('nb-chart ' + fig.id + ': unreadable spec: ' + e);
      return;
    }
    // A data set written as "#<figure id>" is that figure's data set of the same name (one copy per page).
    var sets = spec.datasets || {};
    var names = Object.keys(sets);
    for (var i = 0; i < names.length; i++) {
      var ref = sets[names[i]];
      if (typeof ref !== 'string') continue;
      var src = ref.charAt(0) === '#' ? document.getElementById(ref.slice(1)) : null;
      var other = src ? src.querySelector('script.nb-spec') : null;
      var rows = null;
      try {
        rows = other ? (JSON.parse(other.textContent).datasets || {})[names[i]] : null;
      } catch (e) {
        rows = null;
      }
      if (!Array.isArray(rows)) {
        console.error('nb-chart ' + fig.id + ': no data set ' + names[i] + ' in ' + ref);
        return;
      }
      sets[names[i]] = rows;
    }
    var live = document.createElement('div');
    live.className = 'nb-live';
    live.hidden = true;
    fig.insertBefore(live, still);
    window.vegaEmbed(live, spec, options()).then(function () {
      live.hidden = false;
      still.remove();
      fig.classList.add('nb-interactive');
    }).catch(function (e) {
      live.remove();
      console.error('nb-chart ' + fig.id + ': kept the static picture: ' + e);
    });
  }

  function start() {
    if (!window.vega || !window.vegaEmbed || !window.vega.expressionInterpreter) return;  // static pictures stay
    var figs = document.querySelectorAll('figure.nb-chart');
    for (var i = 0; i < figs.length; i++) upgrade(figs[i]);
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
