"""What the tests share: loopback servers, kernels, browsers, scripted sessions."""
