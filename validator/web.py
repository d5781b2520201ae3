"""The validator's live page: one static HTML document that polls ``/status`` and ``/rounds``."""

LIVE_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Tessera validator</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin-top:1em}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f4f4f4}.bad{color:#b00}.ok{color:#070}code{font-size:12px}
</style></head><body>
<h1>Tessera network <small id="who"></small></h1>
<div id="status"></div>
<table id="rounds"><thead><tr><th>round</th><th>held-out loss before</th><th>after merge</th>
<th>miner: score / consensus / reward</th><th>checkpoint</th><th>verify s</th></tr></thead><tbody></tbody></table>
<p><a href="/docs">API docs</a> &middot; <a href="/metrics">metrics</a></p>
<script>
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))}
async function tick(){
  try{
    const s=await (await fetch('/status')).json();
    document.getElementById('who').textContent=s.address;
    document.getElementById('status').innerHTML='round <b>'+esc(s.round)+'</b> &middot; phase <b>'+esc(s.phase)+'</b>'+
      (s.last_error?' &middot; <span class=bad>'+esc(s.last_error)+'</span>':'');
    const rs=await (await fetch('/rounds')).json();
    const tb=document.querySelector('#rounds tbody'); tb.innerHTML='';
    for(const r of rs.reverse()){
      const miners=Object.keys(Object.assign({},r.scores,r.consensus)).sort();
      const cells=miners.map(m=>'<code>'+esc(m.slice(0,8))+'</code> '+esc(r.scores[m]??'-')+' / '+
        esc(r.consensus[m]??'-')+' / '+esc(r.rewards[m]?(Number(r.rewards[m])/1e18).toFixed(2):'-')+
        (r.stages[m]&&r.stages[m]!=='ok'?' <span class=bad>'+esc(r.stages[m])+'</span>':'')).join('<br>');
      tb.insertAdjacentHTML('beforeend','<tr><td>'+esc(r.round)+'</td><td>'+esc(r.heldout_before??'')+'</td><td>'+
        esc(r.heldout_after??'')+'</td><td style="text-align:left">'+cells+'</td><td><code>'+
        esc((r.checkpoint||'').slice(0,14))+'</code>'+(r.certified?' <span class=ok>certified</span>':'')+
        '</td><td>'+esc(r.verify_seconds??'')+'</td></tr>');
    }
  }catch(e){document.getElementById('status').textContent='offline: '+e}
}
tick();setInterval(tick,2000);
</script></body></html>
"""
