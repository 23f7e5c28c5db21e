"""The server side; it reaches clients only through a transport, never imports them."""
