// Preloaded (`node --require`) into the MCP reference server the suite starts: its Streamable
// HTTP transport listens with `app.listen(PORT)`, on every interface; the tests keep to
// 127.0.0.1, so a listen without a host is given that one.
const net = require('node:net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if ((typeof args[0] === 'number' || typeof args[0] === 'string') && typeof args[1] !== 'string') {
    args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};
