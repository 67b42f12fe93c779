// placeholder, replaced by the node actor
